"""What an operator writes: profiles, workloads, inventories, the strict YAML loader, and redaction."""

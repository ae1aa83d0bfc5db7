"""What the playbooks call: the filters' decisions, the host shell, the host lock, progress lines."""

"""Serving: profiles, plans and manifests for the reference vLLM deployment.

Data flows one way: a profile (YAML) is validated here, rendered into the exact
vLLM argv and container spec, applied to a host by Ansible, and what the host
reports back is compared with what was asked for and recorded in a manifest.
"""

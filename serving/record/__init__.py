"""What ran, recorded and checked: the deploy manifest, verify, effective config, validate, the run record, fleets."""

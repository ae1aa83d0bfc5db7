"""One evidence capture: its parts, config and steps, the bundle and its timeline, summary.txt, and the index a
capture cut short leaves."""

"""python -m serving.diagnose.rules.table: the rules' thresholds table that docs/diagnose.md carries."""

from serving.diagnose.rules import thresholds_table

if __name__ == "__main__":
    print(thresholds_table(), end="")

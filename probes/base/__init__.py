"""What every probe shares: commands run with a bound, kernel text read with a bound, progress lines (standard
library only)."""

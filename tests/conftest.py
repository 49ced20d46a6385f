import sys
from pathlib import Path

# Shared test helpers are imported by module name from every test folder (and by spawned ranks, which inherit
# sys.path): tests/unit/hf/decoder_families.py, the tiny decoder families.
HELPERS = str(Path(__file__).resolve().parent / "unit" / "hf")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

import sys
from pathlib import Path

# Spawned ranks import their worker functions by module name: keep this folder importable (children inherit sys.path),
# and tests/unit/hf for its tiny decoder families.
HERE = Path(__file__).resolve().parent
for folder in (str(HERE), str(HERE.parent / "unit" / "hf")):
    if folder not in sys.path:
        sys.path.insert(0, folder)

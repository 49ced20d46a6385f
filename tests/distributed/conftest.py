import sys
from pathlib import Path

# Spawned ranks import their worker functions by module name: keep this folder importable (children inherit sys.path).
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

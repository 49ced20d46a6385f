import sys
from pathlib import Path

# step_helpers.py, shared by the train-step tests (pytest runs with --import-mode=importlib).
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

"""Make the health-check runner (argocd_health_lua.py, next to this file) importable by name, whether or not
tests/argocd/ is a package and whatever pytest's import mode."""
import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

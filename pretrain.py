"""Pretrain a text encoder: `torchrun pretrain.py --objective clm_then_mlm --switch 0.25` (or plain `python`)."""

import sys

from megamlm.cli import main

if __name__ == "__main__":
    sys.exit(main())

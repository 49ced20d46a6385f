"""Pretrain a text encoder: `torchrun pretrain.py --objective clm_then_mlm --switch 0.25` (or plain `python`)."""

import sys

from megamlm.log import quiet_imports

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

"""Pretrain a text encoder: `torchrun pretrain.py --objective clm_then_mlm --switch 0.25` (or plain `python`)."""

import sys

from megamlm.config.flags import answer_flags_first

if __name__ == "__main__":
    answer_flags_first()  # --help and a flag error answered before torch and transformers are imported

from megamlm.log import quiet_imports  # noqa: E402

quiet_imports()  # before transformers is imported: known third-party import noise (megamlm/log.py)

from megamlm.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

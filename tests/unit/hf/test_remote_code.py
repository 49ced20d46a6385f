"""megamlm never runs code shipped in a Hugging Face folder: every transformers loader gets trust_remote_code=False."""

import json

import pytest

from megamlm.hf.errors import ConversionError
from megamlm.hf.hf_source import HFSource, load_config, load_tokenizer


def remote_code_folder(tmp_path):
    """A model folder whose config names its own Python classes (auto_map), which would create ``marker``."""
    folder, marker = tmp_path / "hub_model", tmp_path / "code_ran"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "not_a_transformers_model", "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                                                               "AutoTokenizer": ["tokenization_evil.Evil", None]}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["tokenization_evil.Evil",
                                                                                            None]}}))
    code = f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    (folder / "configuration_evil.py").write_text(code + "from transformers import PretrainedConfig\n"
                                                  "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")
    (folder / "tokenization_evil.py").write_text(code)
    return folder, marker


@pytest.mark.parametrize("load", [load_config, load_tokenizer])
def test_a_folder_with_custom_code_is_refused_without_running_it(tmp_path, load):
    folder, marker = remote_code_folder(tmp_path)
    with pytest.raises(ConversionError) as err:
        load(HFSource(folder))
    assert f"{folder} ships its own Python code" in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_every_transformers_loader_is_told_not_to_trust_remote_code(monkeypatch, tmp_path):
    import transformers

    from megamlm.eval import model_io

    calls = []

    def recording(name):
        def from_pretrained(*args, **kwargs):
            calls.append((name, kwargs.get("trust_remote_code", "unset")))
            raise OSError("stop here")
        return classmethod(lambda cls, *a, **k: from_pretrained(*a, **k))

    for name in ("AutoConfig", "AutoTokenizer", "AutoModel"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", recording(name))
    monkeypatch.setattr(model_io, "check_model_folder", lambda path: None)
    for call in (lambda: load_config(HFSource(tmp_path)), lambda: load_tokenizer(HFSource(tmp_path)),
                 lambda: model_io.load_tokenizer(tmp_path), lambda: model_io.load_encoder(tmp_path)):
        with pytest.raises((OSError, ConversionError)):
            call()
    assert calls == [("AutoConfig", False), ("AutoTokenizer", False), ("AutoTokenizer", False), ("AutoModel", False)]


def test_an_evaluated_model_folder_with_custom_code_is_refused_without_running_it(tmp_path):
    from megamlm.eval.model_io import ModelFolderError, load_encoder

    folder, marker = remote_code_folder(tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "not_a_transformers_model",
                                                    "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                                                                 "AutoModel": "configuration_evil.EvilConfig"}}))
    (folder / "model.safetensors").write_bytes(b"")  # never read
    with pytest.raises(ModelFolderError, match="ships its own Python code"):
        load_encoder(folder)
    assert not marker.exists()

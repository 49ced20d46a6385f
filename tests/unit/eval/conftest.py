"""Tiny random encoders (BERT, EuroBERT, Llama) with a small byte-level BPE tokenizer, written as
Hugging Face folders, and tiny tasks of each type."""

from pathlib import Path

import pytest

from megamlm.eval.examples import QAExample, RetrievalSplit, TaggedSentence, TaskData, TextExample

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"

WORDS = ("the cat sat on a mat . Elizabeth said that Mr. Darcy was proud , and Jane smiled at Bingley "
         "who walked to Netherfield Park in the rain ? yes no good bad film movie boring great").split()


def _tokenizer(template: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<bos>", "<eos>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([" ".join(WORDS)] * 20, trainer)
    bos, eos = tok.token_to_id("<bos>"), tok.token_to_id("<eos>")
    if template == "cls_sep":
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A <eos>", pair="<bos> $A <eos> $B:1 <eos>:1",
            special_tokens=[("<bos>", bos), ("<eos>", eos)])
    elif template == "bos":
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B:1", special_tokens=[("<bos>", bos)])
    else:  # raw byte-level BPE: nothing added, as the early Llama 3 tokenizer.json
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   mask_token="<mask>", pad_token="<pad>" if template != "none" else None)


def make_tiny_model(folder: Path, arch: str) -> Path:
    import torch
    import transformers

    template = {"bert": "cls_sep", "eurobert": "bos", "llama": "none", "gemma3": "bos"}[arch]
    tokenizer = _tokenizer(template)
    size = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=256)
    ids = dict(pad_token_id=tokenizer.convert_tokens_to_ids("<pad>"), bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id)
    if arch == "bert":
        config = transformers.BertConfig(**size, pad_token_id=ids["pad_token_id"])
        model_cls = transformers.BertModel
    elif arch == "eurobert":
        config = transformers.EuroBertConfig(**size, **ids, num_key_value_heads=2, head_dim=16,
                                             mask_token_id=tokenizer.mask_token_id)
        model_cls = transformers.EuroBertModel
    elif arch == "gemma3":  # the bidirectional Gemma 3 that megamlm exports from a Gemma 3 decoder
        config = transformers.Gemma3TextConfig(**size, **ids, num_key_value_heads=1, head_dim=16, sliding_window=4,
                                               layer_types=["sliding_attention", "full_attention"],
                                               use_bidirectional_attention=True)
        model_cls = transformers.Gemma3TextModel
    else:
        config = transformers.LlamaConfig(**size, **ids, num_key_value_heads=1, head_dim=16)
        model_cls = transformers.LlamaModel
    torch.manual_seed(0)
    model_cls(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class _TinyModels(dict):
    """Folders made on first use; EuroBERT needs a transformers release that has it."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, arch):
        if arch == "eurobert":
            import transformers

            if not hasattr(transformers, "EuroBertConfig"):
                pytest.skip(f"transformers {transformers.__version__} has no EuroBERT")
        self[arch] = make_tiny_model(self.root / arch, arch)
        return self[arch]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    return _TinyModels(tmp_path_factory.mktemp("tiny_models"))


def classification_task(pairs: bool = False) -> TaskData:
    texts = ["good film", "great movie", "bad film", "boring movie", "the cat sat", "the mat was bad"]
    labels = ["pos", "pos", "neg", "neg", "pos", "neg"]
    def make():
        return [TextExample(t, label, "yes no" if pairs else None) for t, label in zip(texts, labels)]

    return TaskData("tiny-cls", "sequence_classification", {"train": make(), "validation": make(), "test": make()})


def tagging_task(bio: bool) -> TaskData:
    if bio:
        rows = [(["Elizabeth", "said", "that", "Mr.", "Darcy", "was", "proud"],
                 ["B-PER", "O", "O", "B-PER", "I-PER", "O", "O"]),
                (["Jane", "walked", "to", "Netherfield", "Park"], ["B-PER", "O", "O", "B-LOC", "I-LOC"])]
    else:
        rows = [(["the", "cat", "sat", "on", "a", "mat", "."], ["DET", "NOUN", "VERB", "ADP", "DET", "NOUN", "."]),
                (["Jane", "smiled", "at", "Bingley"], ["NOUN", "VERB", "ADP", "NOUN"])]
    def make():
        return [TaggedSentence(list(t), list(g)) for t, g in rows]

    return TaskData("tiny-tags", "token_classification", {"train": make(), "validation": make(), "test": make()})


def qa_task() -> TaskData:
    ctx = ("Elizabeth said that Mr. Darcy was proud, and Jane smiled at Bingley who walked to Netherfield Park in "
           "the rain.")
    def make():
        return [QAExample("a", "Who was proud?", ctx, [("Mr. Darcy", ctx.index("Mr. Darcy"))]),
                QAExample("b", "Where did Bingley walk?", ctx, [("Netherfield Park", ctx.index("Netherfield Park"))]),
                QAExample("c", "Who was the cat?", ctx, [])]

    return TaskData("tiny-qa", "question_answering", {"train": make(), "validation": make(), "test": make()})


def retrieval_task() -> TaskData:
    corpus = {"d1": "the cat sat on a mat", "d2": "Mr. Darcy was proud", "d3": "Jane smiled at Bingley",
              "d4": "a boring film in the rain"}
    queries = {"q1": "cat mat", "q2": "Darcy proud", "q3": "Jane Bingley"}
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 2, "d4": 0}, "q3": {"d3": 1}}
    def make():
        return RetrievalSplit(dict(queries), dict(corpus), {q: dict(r) for q, r in qrels.items()})

    return TaskData("tiny-ret", "retrieval", {"train": make(), "validation": make(), "test": make()})

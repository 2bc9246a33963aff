"""Qwen2's tokenizer configuration in HF `tokenizers`, untrained: one place for the fixture script
(make_tokenizer_fixture.py, a 2,000-token vocabulary) and the prepare benchmark (bench/prepare_bench.py, 151,643).
NFC normalizer, Qwen2's pre-tokenizer regex (isolated splits), byte-level without prefix space, and the three
ChatML special tokens that are added after training."""
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN_PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen2_bpe_train(texts, vocab_size, min_frequency):
    """A BPE with Qwen2's normalizer, pre-tokenizer and decoder, trained on the iterable texts, with SPECIALS added."""
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    return tok

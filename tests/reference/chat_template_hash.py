"""The SHA-256 by which io/chat_template.c recognises a chat template: of its text with every space, tab, newline
and carriage return removed. Usage: chat_template_hash.py FILE (a tokenizer_config.json or a .jinja file)."""
import hashlib
import json
import re
import sys

path = sys.argv[1]
text = open(path, encoding="utf-8").read()
if path.endswith(".json"):
    text = json.loads(text)["chat_template"]
print(hashlib.sha256(re.sub(r"[ \t\n\r]", "", text).encode("utf-8")).hexdigest())

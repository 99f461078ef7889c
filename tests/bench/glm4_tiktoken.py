"""The GLM-4 tokenizer as a tiktoken Encoding, for cross-checks and benchmarks only (glmtune itself
never runs Python). Same construction as ../shared/fixtures/make_fixtures.py: tokenizer.model's
"base64 rank" lines as mergeable ranks, the GLM-4 split pattern, specials from
tokenizer_config.json's added_tokens_decoder."""
import base64, json, os

import tiktoken

GLM4_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def glm4_encoding(tok_dir):
    ranks = {}
    with open(os.path.join(tok_dir, "tokenizer.model"), "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    special = {}
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        cfg = json.load(open(cfg_path))
        special = {v["content"]: int(k) for k, v in cfg.get("added_tokens_decoder", {}).items()}
    return tiktoken.Encoding("glm4", pat_str=GLM4_PAT, mergeable_ranks=ranks, special_tokens=special)

"""Checks glmtune's exported adapters and merged models with the real libraries.

Run where torch, transformers and peft are installed (the GPU machine's image), on the output of
tests/peft/make_artifacts.sh: for each layout,
  - PEFT loads the exported adapter (fp32 and bf16) onto the base model, with every LoRA weight
    equal to the file's (nothing missing, nothing left at its init);
  - the loss of base + adapter on the golden rows, computed in float64 by transformers'
    GlmForCausalLM (hf layout) or make_fixtures.py's ChatGLM module (THUDM layout), equals the
    eval loss glmtune logged for the same adapter;
  - the merged model loads where the base loads (from_pretrained / the ChatGLM module) and its
    loss equals PEFT's merge_and_unload() of the same adapter.
usage: python3 check_peft.py ARTIFACTS_DIR
"""
import json, math, os, sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

ART = sys.argv[1]
sys.path.insert(0, ART)
import make_fixtures as mf  # noqa: E402
from peft import LoraConfig, PeftModel  # noqa: E402

torch.set_grad_enabled(False)
rows = []
failures = 0


def report(layout, what, ok, detail):
    global failures
    failures += 0 if ok else 1
    rows.append((layout, what, "ok" if ok else "FAIL", detail))


def docs(layout):
    with open(os.path.join(ART, layout, "golden.jsonl")) as f:
        return [json.loads(l) for l in f]


def loss_of(forward, ds):
    tot, n = 0.0, 0
    for d in ds:
        ids = torch.tensor(d["input_ids"])
        labels = torch.tensor(d["labels"])
        logits = forward(ids, torch.arange(len(ids))).to(torch.float64)
        lp = logits[:-1].log_softmax(-1)
        tgt = labels[1:]
        keep = tgt != -100
        tot -= lp[keep].gather(-1, tgt[keep][:, None]).sum().item()
        n += int(keep.sum())
    return tot / n


def chatglm_model(path):
    cfg = json.load(open(os.path.join(path, "config.json")))
    m = mf.ChatGLM(cfg).to(torch.float64)
    sd = {}
    for f in sorted(os.listdir(path)):
        if f.startswith("model") and f.endswith(".safetensors"):
            sd.update({k: v.to(torch.float64) for k, v in load_file(os.path.join(path, f)).items()})
    sd.pop("transformer.rotary_pos_emb.inv_freq", None)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return m


def hf_model(path):
    from transformers import GlmForCausalLM
    return GlmForCausalLM.from_pretrained(path, torch_dtype=torch.float64).eval()


def fwd(layout, model):
    if layout == "chatglm":
        inner = model
        while hasattr(inner, "base_model") and inner.base_model is not inner:
            inner = inner.base_model
        inner = getattr(inner, "model", inner)
        return lambda ids, pos: inner.forward_doc(ids, pos)
    return lambda ids, pos: model(input_ids=ids[None], position_ids=pos[None]).logits[0]


def load_peft(layout, base, adapter_dir):
    cfg = LoraConfig.from_pretrained(adapter_dir)
    if layout == "chatglm":  # a plain nn.Module, not a transformers model: the base PeftModel class
        cfg.task_type = None
    pm = PeftModel.from_pretrained(base, adapter_dir, config=cfg)
    pm.to(torch.float64)
    return pm


def check_weights(layout, pm, adapter_dir):
    """Every tensor of the file is in the model, unchanged; every LoRA weight of the model came from the file."""
    want = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    have = {k.replace(".default", ""): v for k, v in pm.named_parameters() if "lora_" in k}
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    worst = max((have[k].double() - want[k].double()).abs().max().item() for k in want if k in have)
    ok = not missing and not extra and worst == 0.0
    report(layout, f"PEFT loads {os.path.basename(adapter_dir)}", ok,
           f"{len(want)} tensors, missing {len(missing)}, unexpected {len(extra)}, max |diff| {worst:.1e}")


for layout in ("chatglm", "hf"):
    D = os.path.join(ART, layout)
    make = chatglm_model if layout == "chatglm" else hf_model
    ds = docs(layout)
    glm_eval = json.loads(open(os.path.join(D, "eval.json")).read())["eval_loss"]
    for ad in ("adapter", "adapter-bf16"):
        pm = load_peft(layout, make(os.path.join(D, "base")), os.path.join(D, ad))
        check_weights(layout, pm, os.path.join(D, ad))
        if ad == "adapter":
            peft_loss = loss_of(fwd(layout, pm), ds)
            rel = abs(peft_loss - glm_eval) / abs(peft_loss)
            report(layout, "loss: PEFT (float64) vs glmtune eval", rel < 1e-5,
                   f"{peft_loss:.8f} vs {glm_eval:.8f} (rel {rel:.1e})")
            merged_ref = pm.merge_and_unload()
            ref_loss = loss_of(fwd(layout, merged_ref), ds)
    for md, tol in (("merged", 1e-6), ("merged-bf16", 2e-2)):
        m = make(os.path.join(D, md))
        ml = loss_of(fwd(layout, m), ds)
        rel = abs(ml - ref_loss) / abs(ref_loss)
        report(layout, f"{md} loads; loss vs PEFT merge_and_unload", rel < tol, f"{ml:.8f} vs {ref_loss:.8f} (rel {rel:.1e})")

print(f"\n{'layout':8} {'check':48} {'':4} detail")
for r in rows:
    print(f"{r[0]:8} {r[1]:48} {r[2]:4} {r[3]}")
import peft, transformers
print(f"\ntorch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}")
print(f"check_peft: {len(rows) - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)

"""tiktoken side of bench_tokenizer.sh (benchmark only; glmtune never runs Python).

usage: bench_tiktoken.py prepare CORPORA_DIR OUT_CORPUS OUT_20MB [OUT_ZH OUT_EN]
         writes every JSON string value of CORPORA_DIR/**/*.json* joined by newlines (the same
         walk as tests/fixtures/make_fixtures.py), that text repeated to ~20 MB, and the
         strings of llamafactory/alpaca_zh_demo.json (Chinese) and alpaca_en_demo.json (English)
       bench_tiktoken.py run TOKENIZER_DIR TEXT LABEL THREADS(1,2) MIN_TIME
         prints "tiktoken LABEL whole 1 MB/s n_ids fnv1a64(ids)" (encode_ordinary of the whole
         text, best of runs) and "tiktoken LABEL chunks N MB/s n_ids -" (encode_ordinary_batch
         over ~1 MiB chunks cut at newlines, num_threads=N), the lines bench_tokenizer prints."""
import glob, json, os, struct, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def strings_in(o, out):
    if isinstance(o, str):
        out.append(o)
    elif isinstance(o, dict):
        for v in o.values():
            strings_in(v, out)
    elif isinstance(o, list):
        for v in o:
            strings_in(v, out)


def strings_of(path):
    got = []
    strings_in(json.load(open(path, encoding="utf-8")), got)
    return "\n".join(got).encode("utf-8")


def prepare(corpora, out1, out20, out_zh=None, out_en=None):
    if out_zh:
        open(out_zh, "wb").write(strings_of(os.path.join(corpora, "llamafactory", "alpaca_zh_demo.json")))
    if out_en:
        open(out_en, "wb").write(strings_of(os.path.join(corpora, "llamafactory", "alpaca_en_demo.json")))
    got = []
    for path in sorted(glob.glob(os.path.join(corpora, "**", "*.json*"), recursive=True)):
        raw = open(path, encoding="utf-8").read()
        try:
            recs = ([json.loads(l) for l in raw.splitlines() if l.strip()] if path.endswith(".jsonl")
                    else json.loads(raw))
        except ValueError as e:
            print("skip", path, e, file=sys.stderr)
            continue
        strings_in(recs, got)
    b = "\n".join(got).encode("utf-8")
    open(out1, "wb").write(b)
    open(out20, "wb").write(b * max(1, round(20e6 / len(b))))


def fnv(ids):
    h = 0xcbf29ce484222325
    for byte in struct.pack("<%dI" % len(ids), *ids):
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def best_time(fn, min_time):
    best, spent, reps = 1e30, 0.0, 0
    while spent < min_time or reps < 2:
        t0 = time.perf_counter()
        r = fn()
        dt = time.perf_counter() - t0
        spent += dt
        reps += 1
        best = min(best, dt)
    return best, r


def run(tok_dir, text_path, label, threads, min_time):
    from glm4_tiktoken import glm4_encoding
    enc = glm4_encoding(tok_dir)
    raw = open(text_path, "rb").read()
    text = raw.decode("utf-8")
    nb = len(raw)
    dt, ids = best_time(lambda: enc.encode_ordinary(text), min_time)
    print("tiktoken %s whole 1 %.2f %d %016x" % (label, nb / dt / 1e6, len(ids), fnv(ids)), flush=True)
    chunks, p = [], 0  # ~1 MiB chunks at newlines, as bench_tokenizer cuts them (by bytes)
    while p < len(raw):
        e = min(p + (1 << 20), len(raw))
        while e < len(raw) and raw[e - 1] != 0x0A:
            e += 1
        chunks.append(raw[p:e].decode("utf-8"))
        p = e
    for nt in [int(x) for x in threads.split(",")]:
        dt, res = best_time(lambda: enc.encode_ordinary_batch(chunks, num_threads=nt), min_time)
        print("tiktoken %s chunks %d %.2f %d -" % (label, nt, nb / dt / 1e6, sum(map(len, res))), flush=True)


if __name__ == "__main__":
    if len(sys.argv) in (5, 7) and sys.argv[1] == "prepare":
        prepare(*sys.argv[2:])
    elif len(sys.argv) == 7 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
    else:
        sys.exit(__doc__)

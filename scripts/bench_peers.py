"""The Python side of scripts/bench-peers.sh: the tokenizers it measures, gigatoken's
runs, the exactness check and the report.

  bench_peers.py tokenizers DIR CORPUS_JSONL LLAMA3_JSON
      writes DIR/{qwen2,spbpe}/tokenizer.json: Qwen2's structure (NFC, its split
      pattern) on cl100k's ranks, and a SentencePiece-style BPE with Llama-2's
      structure (Prepend + Replace normalizer, byte fallback, fuse_unk) trained
      here on the corpus with Python `tokenizers`.
  bench_peers.py deepseek-v3 DIR LLAMA3_JSON
      writes DIR/deepseek_v3/tokenizer.json: DeepSeek-V3's pre-tokenizer (its three
      Splits, as its tokenizer.json spells them, then ByteLevel) on cl100k's ranks.
  bench_peers.py gigatoken TOKENIZER_JSON FILE...
      gigatoken's encode_files on the files (threads from RAYON_NUM_THREADS), the
      result kept in memory; prints one JSON line.
  bench_peers.py gigatoken-core TOKENIZER_JSON TEXT_FILE
      gigatoken on one thread from memory, on TEXT_FILE cut into documents as
      benches/encoders.rs --cores cuts it; prints one JSON line.
  bench_peers.py exact TOKENIZER_JSON ENTRY_DIR FILE...
      how many documents' ids from ferry's entry and from gigatoken differ from
      Python `tokenizers`; prints one JSON line.
  bench_peers.py timed TIMING_JSON COMMAND...
      runs COMMAND (its output passed through) and writes its wall seconds, CPU
      seconds (user + system, every thread) and peak resident memory to TIMING_JSON.
  bench_peers.py report RESULTS_JSONL CORES
"""

import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

DOCUMENT_BYTES = 16 * 1024


def test_families():
    """The split patterns as the tests spell them (tests/python/byte_level_families.py),
    so that the bench measures the same ones; imported when a tokenizer is written,
    since that module needs Python `tokenizers`."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
    import byte_level_families

    return byte_level_families


def write_tokenizer_json(out, family, tokenizer):
    os.makedirs(f"{out}/{family}", exist_ok=True)
    json.dump(tokenizer, open(f"{out}/{family}/tokenizer.json", "w"))


def texts(files):
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)["text"]


def write_tokenizers(out, corpus, llama3_json):
    qwen2 = json.load(open(llama3_json))
    qwen2["normalizer"] = {"type": "NFC"}
    qwen2["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": test_families().QWEN2}
    write_tokenizer_json(out, "qwen2", qwen2)

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    # Trained on Metaspace words (training on whole documents as one word is far too
    # slow); Llama-2 itself has no pre-tokenizer, which is set below.
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=specials + byte_tokens, show_progress=False)
    sample = []
    for text in texts([corpus]):
        sample.append(text)
        if sum(map(len, sample)) > 20_000_000:
            break
    tokenizer.train_from_iterator(sample, trainer)
    tokenizer.pre_tokenizer = None
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    spbpe = json.loads(tokenizer.to_str())
    # As in Llama-2, the byte tokens are ordinary vocabulary, not added tokens.
    spbpe["added_tokens"] = [t for t in spbpe["added_tokens"] if t["content"] in specials]
    write_tokenizer_json(out, "spbpe", spbpe)


def run_gigatoken(tokenizer_json, files):
    import awkward as ak
    import gigatoken

    # ferry's time includes loading its tokenizer; this one's load is timed apart.
    loading = time.perf_counter()
    tokenizer = gigatoken.Tokenizer(tokenizer_json)
    started, cpu_started = time.perf_counter(), time.process_time()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    ids = tokenizer.encode_files(gigatoken.JsonlFileSource(files, field="text"))
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    tokens = int(ak.sum(ak.num(ids)))
    # The peak is the whole process's, the interpreter and the loaded tokenizer included.
    print(json.dumps({"seconds": seconds, "load_seconds": started - loading, "cpu_seconds": cpu_seconds,
                      "system_seconds": usage.ru_stime - usage_before.ru_stime,
                      "page_faults": usage.ru_minflt - usage_before.ru_minflt,
                      "max_rss_mib": usage.ru_maxrss / 1024, "tokens": tokens, "documents": len(ids)}))


def run_timed(timing_json, command):
    """Wall and CPU time of one child process, the kernel's share of it, the pages
    it touched for the first time (minor faults: fresh memory, zeroed by the
    kernel), and its peak resident memory."""
    started = time.perf_counter()
    finished = subprocess.run(command)
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(timing_json, "w") as f:
        json.dump({"seconds": seconds, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                   "system_seconds": usage.ru_stime, "page_faults": usage.ru_minflt,
                   "max_rss_mib": usage.ru_maxrss / 1024}, f)
    sys.exit(finished.returncode)


def documents_of(text_file):
    documents, document = [], []
    size = 0
    with open(text_file, encoding="utf-8", errors="replace", newline="") as f:
        for line in f:
            document.append(line)
            size += len(line.encode())
            if size >= DOCUMENT_BYTES:
                documents.append("".join(document))
                document, size = [], 0
    if document:
        documents.append("".join(document))
    return documents


def run_gigatoken_core(tokenizer_json, text_file):
    import gigatoken

    documents = documents_of(text_file)

    def timed(tokenizer):
        started = time.perf_counter()
        ids = tokenizer.encode_batch(documents, parallel=False)
        return time.perf_counter() - started, sum(len(row) for row in ids)

    # Cold: a new tokenizer object each pass, its cache empty, as ferry's fast core
    # is timed; warm: passes after the first on one object.
    cold = min(timed(gigatoken.Tokenizer(tokenizer_json)) for _ in range(3))
    tokenizer = gigatoken.Tokenizer(tokenizer_json)
    timed(tokenizer)
    warm = min(timed(tokenizer) for _ in range(2))
    print(json.dumps({"seconds": cold[0], "tokens": cold[1], "tokens_per_second": cold[1] / cold[0],
                      "warm_tokens_per_second": warm[1] / warm[0]}))


def entry_rows(entry):
    """ferry's rows (pack = "none": one per document), in order, as numpy arrays."""
    import pyarrow as pa

    for path in sorted(glob.glob(f"{entry}/train/*.arrow")):
        with pa.memory_map(path) as source:
            table = pa.ipc.open_stream(source).read_all()
        column = table.column("input_ids")
        for chunk in column.chunks:
            values = chunk.values.to_numpy()
            offsets = chunk.offsets.to_numpy()
            for k in range(len(chunk)):
                yield values[offsets[k] : offsets[k + 1]]


def check_exact(tokenizer_json, entry, files):
    import awkward as ak
    import gigatoken
    import numpy as np
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(tokenizer_json)
    giga = ak.to_numpy(ak.flatten(gigatoken.Tokenizer(tokenizer_json).encode_files(gigatoken.JsonlFileSource(files, field="text"))))
    giga_at = 0
    rows = entry_rows(entry)
    documents = ferry_differ = giga_differ = 0
    batch = []

    def check(batch):
        nonlocal documents, ferry_differ, giga_differ, giga_at
        for encoding in reference.encode_batch(batch, add_special_tokens=False):
            expected = np.asarray(encoding.ids, dtype=np.int64)
            row = next(rows, None)
            ferry_differ += row is None or not np.array_equal(np.asarray(row, dtype=np.int64), expected)
            got = giga[giga_at : giga_at + len(expected)]
            giga_differ += not np.array_equal(np.asarray(got, dtype=np.int64), expected)
            giga_at += len(expected)
            documents += 1

    for text in texts(files):
        batch.append(text)
        if len(batch) == 512:
            check(batch)
            batch = []
    check(batch)
    extra_rows = sum(1 for _ in rows)
    print(json.dumps({"documents": documents, "ferry_differ": ferry_differ + extra_rows,
                      "gigatoken_differ": giga_differ, "gigatoken_extra_tokens": len(giga) - giga_at}))


def runs_of(runs, tool, family, threads, having=None):
    """The runs of one tool on one tokenizer and thread count, in the order they
    ran; with `having`, only those that recorded that field."""
    return [r for r in runs if r.get("family") == family and r.get("threads") == threads and r["tool"] == tool
            and (having is None or having in r)]


def cases(runs, families):
    """Each tokenizer and thread count that ran, in the report's order."""
    for family in families:
        for threads in sorted({r["threads"] for r in runs if r.get("family") == family and "threads" in r}):
            yield family, threads


def least(runs, key):
    return min(r[key] for r in runs)


def most(runs, key):
    return max(r[key] for r in runs)


def fastest(runs):
    """The run that took the least time."""
    return min(runs, key=lambda r: r["seconds"])


def gigatoken_best_speed(giga):
    """gigatoken's tokens per second in its fastest run (every run encodes the same tokens)."""
    return giga[0]["tokens"] / least(giga, "seconds")


def before_first_document(run):
    """A ferry run's seconds before its first document: tokenizer identity, input hashes, encoders."""
    t = run["timings"]
    return t["total_seconds"] - t["tokenize_seconds"] - t["publish_seconds"]


def paired_ratios(runs, family, threads):
    """ferry's speed over gigatoken's in each round (the runs are written in the
    order they ran: in a round, ferry's run comes right before gigatoken's)."""
    def speeds(tool):
        return [r["tokens"] / r["seconds"] for r in runs_of(runs, tool, family, threads)]

    return median_and_range([f / g for f, g in zip(speeds("ferry"), speeds("gigatoken"))])


def median_and_range(ratios):
    """Ratios of paired runs as their median and (least-most)."""
    ratios = sorted(ratios)
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def report(results, cores):
    runs = [json.loads(line) for line in open(results) if line.strip()]
    families = list(dict.fromkeys(r["family"] for r in runs if "family" in r))
    print(f"\nferry prepare (pack none, uint32, entry written) against gigatoken encode_files (ids in memory),")
    print("same plain JSONL, same threads; best of the rounds; tokens/s (higher is better)")
    print("(with load: against gigatoken with loading its tokenizer counted, as ferry's time counts its own;")
    print(" paired: each round's ferry run against the gigatoken run right after it, median and range, which")
    print(" a slow minute of a shared host moves less than it moves either tool's best)")
    print(f"{'tokenizer':10s} {'threads':>7s} {'ferry':>10s} {'gigatoken':>10s}  ferry/gigatoken  encoder"
          f"                 with load  paired")
    for family, threads in cases(runs, families):
        def best(tool):
            return max(runs_of(runs, tool, family, threads), key=lambda r: r["tokens"] / r["seconds"], default=None)
        ferry, giga = best("ferry"), best("gigatoken")
        if not ferry or not giga:
            continue
        ratio = (ferry["tokens"] / ferry["seconds"]) / (giga["tokens"] / giga["seconds"])
        loaded = runs_of(runs, "gigatoken", family, threads, "load_seconds")
        loaded_seconds = min((r["seconds"] + r["load_seconds"] for r in loaded), default=None)
        with_load = "-" if loaded_seconds is None else f"{loaded_seconds / ferry['seconds']:.2f}x"
        print(f"{family:10s} {threads:7d} {ferry['tokens'] / ferry['seconds'] / 1e6:8.2f} M {giga['tokens'] / giga['seconds'] / 1e6:8.2f} M"
              f"  {ratio:6.2f}x (target >= 1.0x) {'OK' if ratio >= 1 else 'MISSED'}   {ferry.get('encoder', '?'):22s} {with_load:>9s}"
              f"  {paired_ratios(runs, family, threads)}")
    print("\nwhere ferry's time went, best run: before its first document (tokenizer identity, input hashes,")
    print("encoders), tokenizing, publishing, and outside (process start and exit); tokenizing alone against gigatoken")
    for family, threads in cases(runs, families):
        mine = runs_of(runs, "ferry", family, threads, "timings")
        giga = runs_of(runs, "gigatoken", family, threads)
        if not mine or not giga:
            continue
        ferry = fastest(mine)
        t = ferry["timings"]
        before = before_first_document(ferry)
        outside = ferry["seconds"] - t["total_seconds"]
        tokenizing = (ferry["tokens"] / t["tokenize_seconds"]) / gigatoken_best_speed(giga)
        print(f"{family:10s} {threads:7d}  before {before:.2f} s, tokenizing {t['tokenize_seconds']:.2f} s, "
              f"publishing {t['publish_seconds']:.2f} s, outside {outside:.2f} s; tokenizing alone {tokenizing:.2f}x")
    print("\nthe same entry built again after each round's gigatoken run, as a later build of the same tokenizer")
    print("and inputs would be: the memos the first build left are kept (tokenizer identity, confirmation of its")
    print("canonical form, input hashes); best run, its time before the first document; CPU least of the rounds")
    for family, threads in cases(runs, families):
        again = runs_of(runs, "ferry_again", family, threads, "timings")
        first = runs_of(runs, "ferry", family, threads, "timings")
        giga = runs_of(runs, "gigatoken", family, threads)
        if not again or not first or not giga:
            continue
        best, best_first = fastest(again), fastest(first)
        ratio = (best["tokens"] / best["seconds"]) / gigatoken_best_speed(giga)
        print(f"{family:10s} {threads:7d}  {best['tokens'] / best['seconds'] / 1e6:8.2f} M tokens/s, ferry/gigatoken "
              f"{ratio:.2f}x ({best.get('encoder', '?')}); before {before_first_document(best):.2f} s "
              f"(first build {before_first_document(best_first):.2f} s); CPU {least(again, 'cpu_seconds'):.2f} s "
              f"(first build {least(first, 'cpu_seconds'):.2f} s)")
    print("\nCPU time (user + system, every thread), least of the rounds: the work each tool does, apart from")
    print("waiting; ferry's is the whole prepare, gigatoken's its encode_files call alone; and peak resident memory")
    print("(gigatoken's counts the Python interpreter and its loaded tokenizer)")
    for family, threads in cases(runs, families):
        mine = runs_of(runs, "ferry", family, threads, "cpu_seconds")
        giga = runs_of(runs, "gigatoken", family, threads, "cpu_seconds")
        if not mine or not giga:
            continue
        ferry_cpu, giga_cpu = least(mine, "cpu_seconds"), least(giga, "cpu_seconds")
        print(f"{family:10s} {threads:7d}  CPU ferry {ferry_cpu:.2f} s, gigatoken {giga_cpu:.2f} s: "
              f"ferry needs {ferry_cpu / giga_cpu:.2f}x gigatoken's CPU; peak RSS ferry "
              f"{most(mine, 'max_rss_mib'):.0f} MiB, gigatoken {most(giga, 'max_rss_mib'):.0f} MiB")
        mine = runs_of(runs, "ferry", family, threads, "page_faults")
        giga = runs_of(runs, "gigatoken", family, threads, "page_faults")
        if mine and giga:
            print(f"{'':18s}  of it in the kernel, least: ferry {least(mine, 'system_seconds'):.2f} s, "
                  f"gigatoken {least(giga, 'system_seconds'):.2f} s; pages first touched (minor faults), least: "
                  f"ferry {least(mine, 'page_faults') / 1000:.1f} k, gigatoken {least(giga, 'page_faults') / 1000:.1f} k")
    for r in runs:
        if r.get("tool") == "exact":
            print(f"{r['family']:10s} documents whose ids differ from Python tokenizers: ferry {r['ferry_differ']}/{r['documents']}, "
                  f"gigatoken {r['gigatoken_differ']}/{r['documents']}")
    for r in runs:
        if r.get("tool") == "long_word":
            print(f"{r['family']:10s} one word of {r['bytes'] / 1e6:.0f} MB random letters: {r['seconds']:.2f} s on the fast core "
                  f"(target < 1 s) {'OK' if r['seconds'] < 1 else 'MISSED'}; ids equal tokenizers': {r['same_as_tokenizers']}")
            blank = r["blank_lines_seconds"]
            print(f"{r['family']:10s} {r['bytes'] / 1e6:.0f} MB of blank lines (one whitespace run): {blank:.2f} s on the fast core "
                  f"(target < 1 s) {'OK' if blank < 1 else 'MISSED'}; ids equal tokenizers': {r['blank_lines_same_as_tokenizers']}")
    core_runs = [r for r in runs if r.get("tool") == "core"]
    for family in dict.fromkeys(r["family"] for r in core_runs):
        rounds = [r for r in core_runs if r["family"] == family]
        for cache, fast, giga in [("cold", "fast_tokens_per_second", "gigatoken_tokens_per_second"),
                                  ("warm", "fast_warm_tokens_per_second", "gigatoken_warm_tokens_per_second")]:
            best_fast, best_giga = max(r[fast] for r in rounds), max(r[giga] for r in rounds)
            paired = median_and_range(r[fast] / r[giga] for r in rounds)
            print(f"{family:10s} one thread from memory, cache {cache}: ferry's fast core {best_fast / 1e6:.2f} M tokens/s, "
                  f"gigatoken {best_giga / 1e6:.2f} M: {best_fast / best_giga:.2f}x (best of {len(rounds)}; paired {paired})")


def write_deepseek_v3(out, llama3_json):
    # Its three Splits as the tests spell them: as DeepSeek-V3's tokenizer.json does.
    deepseek = json.load(open(llama3_json))
    deepseek["normalizer"] = {"type": "Sequence", "normalizers": []}
    splits = [{"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
              for pattern in test_families().DEEPSEEK_V3]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    deepseek["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": splits + [byte_level]}
    write_tokenizer_json(out, "deepseek_v3", deepseek)


def main():
    command, args = sys.argv[1], sys.argv[2:]
    if command == "tokenizers":
        write_tokenizers(*args)
    elif command == "deepseek-v3":
        write_deepseek_v3(*args)
    elif command == "gigatoken":
        run_gigatoken(args[0], args[1:])
    elif command == "timed":
        run_timed(args[0], args[1:])
    elif command == "gigatoken-core":
        run_gigatoken_core(*args)
    elif command == "exact":
        check_exact(args[0], args[1], args[2:])
    elif command == "report":
        report(args[0], args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

"""Streaming top-k retrieval: the same top-10 as a dense score matrix, and a million-document corpus
ranked against 1,000 queries within 1 GB (peak resident memory of a fresh process, torch included:
/proc's VmHWM, as ru_maxrss carries the parent's peak across exec)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from megamlm.eval import ranking

ROOT = Path(__file__).resolve().parents[3]
DIM = 16


def _corpus_chunks(generator: torch.Generator, documents: int, chunk: int):
    for start in range(0, documents, chunk):
        yield torch.randn(min(chunk, documents - start), DIM, generator=generator)


def test_same_top10_as_a_dense_reference_on_10k(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    queries = torch.randn(1000, DIM, generator=generator)
    corpus = torch.cat(list(_corpus_chunks(generator, 10_000, 10_000)))
    dense_scores, dense_top = (queries @ corpus.T).topk(10, dim=1)
    for chunk in (10_000, 999):
        scores, top = ranking.streaming_top_k(queries, corpus.split(chunk), 10)
        assert torch.equal(top, dense_top) and torch.allclose(scores, dense_scores)
    monkeypatch.setattr(ranking, "SCORE_BLOCK_ELEMENTS", 1000 * 1500)  # score blocks inside a chunk, too
    scores, top = ranking.streaming_top_k(queries, corpus.split(4096), 10)
    assert torch.equal(top, dense_top)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux /proc to read the peak memory")
def test_a_million_documents_against_1000_queries_in_under_1_gb():
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import torch
        from megamlm.eval.ranking import streaming_top_k
        def peak_kb():
            with open("/proc/self/status") as f:
                return int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
        baseline = peak_kb()
        generator = torch.Generator().manual_seed(0)
        queries = torch.randn(1000, {DIM}, generator=generator)
        chunks = (torch.randn(50_000, {DIM}, generator=generator) for _ in range(20))
        started = time.perf_counter()
        scores, top = streaming_top_k(queries, chunks, 10)
        print(json.dumps({{"peak_kb": peak_kb(), "baseline_kb": baseline,
                          "seconds": time.perf_counter() - started, "shape": list(top.shape),
                          "max_index": int(top.max()), "sorted": bool((scores[:, :-1] >= scores[:, 1:]).all())}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["shape"] == [1000, 10] and report["sorted"] and report["max_index"] < 1_000_000
    assert report["max_index"] > 900_000  # the whole corpus was ranked
    assert report["peak_kb"] < 1024 * 1024, report

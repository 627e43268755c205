"""The load test of benchmarks/serve_load.py, bounded: 200 requests from 8 concurrent clients against the test
server, over every run; the bar is no error (every answer 200 and equal to the same request made alone)."""


import pytest


@pytest.mark.slow
@pytest.mark.whole_machine  # 8 clients and the server's 2 workers
def test_200_requests_from_8_clients_all_answered_correctly(server, served):
    from benchmarks.serve_load import jobs_for, load_test

    quick = [run for run in served if run.name in ("cls", "detr", "setr", "vqgan")]  # about 50 ms a request
    jobs = jobs_for(quick)
    assert {job[0] for job in jobs} == {"cls", "detr", "setr", "vqgan"}
    result = load_test(server, jobs, requests=200, clients=8)
    assert result["errors"] == [], result["errors"][:5]
    assert result["requests"] == 200 and 0 < result["p50_ms"] <= result["p95_ms"] <= result["max_ms"]


def test_a_wrong_answer_counts_as_an_error(monkeypatch):
    from benchmarks import serve_load

    answers = iter([(200, {"top_k": [1]})] + [(200, {"top_k": [1]}), (200, {"top_k": [2]}), (500, "boom")] * 2)
    monkeypatch.setattr(serve_load, "ask", lambda url, job: next(answers))
    result = serve_load.load_test("http://unused", [("cls", None, {})], requests=6, clients=1)
    assert len(result["errors"]) == 4
    assert sum("differs" in e for e in result["errors"]) == 2 and sum("HTTP 500" in e for e in result["errors"]) == 2

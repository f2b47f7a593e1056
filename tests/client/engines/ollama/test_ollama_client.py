"""The httpx adapter against the fake Ollama (a real HTTP server on loopback): endpoints,
streamed generation, and every error turned into one clear message."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from specsubmit.engines.ollama.client import GenerateRequest, OllamaClient, PullProgress
from specsubmit.errors import (
    ModelMissing,
    OllamaError,
    OllamaStreamError,
    OllamaTimeout,
    OllamaUnreachable,
)
from tests.fakeollama import FakeModel, FakeOllama
from tests.support.ports import free_port as _free_port

OPTIONS = {"num_predict": 50, "temperature": 0.0, "seed": 42, "top_k": 40, "top_p": 0.9,
           "repeat_penalty": 1.1, "num_ctx": 4096}


def _request(model: str = "qwen3:14b", **options: object) -> GenerateRequest:
    return GenerateRequest(model=model, prompt="Write merge_dicts.",
                           options={**OPTIONS, **options}, keep_alive="30m")  # type: ignore[arg-type]


@pytest.fixture
def fake(tmp_path: Path):
    with FakeOllama(version="0.33.1", log_path=tmp_path / "server.log",
                    models=[FakeModel("qwen3:14b"), FakeModel("mtp:9b", mtp=True)]) as server:
        yield server


@pytest.fixture
def client(fake: FakeOllama):
    with OllamaClient(fake.url, timeout_s=5) as c:
        yield c


def test_version_tags_show_ps(client: OllamaClient, fake: FakeOllama) -> None:
    assert client.version() == "0.33.1"
    tags = client.tags()
    assert [t["name"] for t in tags] == ["qwen3:14b", "mtp:9b"]
    assert len(tags[0]["digest"]) == 64
    show = client.show("qwen3:14b")
    assert show["details"]["quantization_level"] == "Q4_K_M"
    assert "mtp:9b" not in {m["name"] for m in client.ps()}
    client.generate(_request("mtp:9b"))
    (loaded,) = client.ps()
    assert loaded["name"] == "mtp:9b" and loaded["size_vram"] == loaded["size"]


def test_generate_metrics_are_consistent(client: OllamaClient) -> None:
    gen = client.generate(_request())
    assert gen.eval_count == 50 and gen.done_reason == "length"
    assert gen.total_duration_ns >= (gen.load_duration_ns + (gen.prompt_eval_duration_ns or 0)
                                     + gen.eval_duration_ns)
    assert gen.wall_s >= gen.total_duration_ns / 1e9
    assert gen.ttft_s is not None and 0 < gen.ttft_s < gen.wall_s
    assert gen.text and gen.prompt_eval_count


def test_greedy_output_is_deterministic_and_natural_stop(client: OllamaClient) -> None:
    first, second = client.generate(_request()), client.generate(_request())
    assert first.text == second.text
    other = client.generate(_request(num_predict=-1))
    assert other.done_reason == "stop" and other.eval_count == 400


def test_stream_has_metrics_only_on_the_final_chunk(client: OllamaClient) -> None:
    chunks = [chunk for _, chunk in client.stream_generate(_request(num_predict=5))]
    assert [c["done"] for c in chunks] == [False] * 5 + [True]
    assert all("eval_count" not in c for c in chunks[:-1])
    assert isinstance(chunks[-1]["total_duration"], int)


def test_unknown_fields_and_options_are_ignored_with_a_warning(
        client: OllamaClient, fake: FakeOllama, tmp_path: Path) -> None:
    request = GenerateRequest(model="qwen3:14b", prompt="hi", options={**OPTIONS, "bogus": 1},
                              extra_fields={"draft_model": "qwen2.5:0.5b"})
    assert client.generate(request).eval_count == 50
    method, path, body = fake.requests[-1]
    assert body["draft_model"] == "qwen2.5:0.5b" and body["stream"] is True
    assert 'msg="invalid option provided" option=bogus' in (tmp_path / "server.log").read_text()


def test_wrong_option_type_is_http_500(client: OllamaClient) -> None:
    with pytest.raises(OllamaError) as info:
        client.generate(_request(num_predict="200"))
    assert info.value.message == (
        'Ollama answered HTTP 500 to /api/generate: option "num_predict" must be of type integer')


def test_fake_follows_go_option_decoding(client: OllamaClient) -> None:
    # JSON numbers are float64 in Go: 200.0 is a valid integer option, true is not
    assert client.generate(_request(num_predict=20.0)).eval_count == 20
    for key, value, kind in (("num_predict", True, "integer"), ("temperature", "0", "float32"),
                             ("stop", "x", "array")):
        with pytest.raises(OllamaError, match=f'option "{key}" must be of type {kind}'):
            client.generate(_request(**{key: value}))


def test_fake_bad_keep_alive_empty_prompt_and_no_stream(fake: FakeOllama) -> None:
    with httpx.Client(base_url=fake.url) as http:
        bad = http.post("/api/generate", json={"model": "qwen3:14b", "keep_alive": "soon"})
        assert (bad.status_code, bad.json()) == (400, {"error": 'time: invalid duration "soon"'})
        load = http.post("/api/generate", json={"model": "qwen3:14b"}).json()
        assert load["done"] is True and load["done_reason"] == "load"
        whole = http.post("/api/generate", json={"model": "qwen3:14b", "prompt": "hi",
                                                 "stream": False, "options": OPTIONS})
        assert whole.headers["content-type"] == "application/json; charset=utf-8"
        body = whole.json()
        assert body["eval_count"] == 50 and len(body["response"]) > 0
        assert body["total_duration"] >= body["load_duration"] + body["eval_duration"]
        assert http.get("/").text == "Ollama is running"
        assert http.get("/api/nope").status_code == 404


def test_draft_num_predict_speeds_up_an_mtp_model_only_from_0_30(tmp_path: Path) -> None:
    for version, expect_faster in (("0.33.1", True), ("0.12.8", False)):
        log = tmp_path / f"{version}.log"
        with FakeOllama(version=version, log_path=log,
                        models=[FakeModel("mtp:9b", mtp=True, tokens_per_s=2000)]) as fake, \
                OllamaClient(fake.url) as client:
            off = client.generate(_request("mtp:9b", draft_num_predict=0, num_predict=100))
            on = client.generate(_request("mtp:9b", draft_num_predict=4, num_predict=100))
            assert on.text == off.text
            ratio = (on.eval_count / on.eval_duration_ns) / (off.eval_count / off.eval_duration_ns)
            assert (ratio > 1.5) is expect_faster, (version, ratio)
            text = log.read_text()
            assert ("draft acceptance rate" in text) is expect_faster
            assert ('option=draft_num_predict' in text) is (not expect_faster)


def test_pull_reports_progress_in_bytes(tmp_path: Path) -> None:
    new = FakeModel("qwen2.5:0.5b", size=1000)
    seen: list[PullProgress] = []
    with FakeOllama(models=[], pullable=[new]) as fake, OllamaClient(fake.url) as client:
        client.pull("qwen2.5:0.5b", seen.append)
        assert [t["name"] for t in client.tags()] == ["qwen2.5:0.5b"]
        with pytest.raises(OllamaError, match="could not pull nope: .*file does not exist"):
            client.pull("nope")
    assert seen[0].status == "pulling manifest" and seen[-1].status == "success"
    sized = [p for p in seen if p.total]
    assert sized[-1].completed == sized[-1].total == 1000


# --- errors -------------------------------------------------------------------------------


def test_nothing_listening() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with OllamaClient(url) as client, pytest.raises(OllamaUnreachable) as info:
        client.version()
    assert info.value.message == (
        f"Ollama is not running at {url} — start it with `ollama serve`")


def test_missing_model_names_it_and_the_pull_flag(client: OllamaClient) -> None:
    for call in (lambda: client.generate(_request("nope:1b")), lambda: client.show("nope:1b")):
        with pytest.raises(ModelMissing) as info:
            call()
        assert "model 'nope:1b'" in info.value.message
        assert "--pull" in info.value.message and "ollama pull nope:1b" in info.value.message


def test_error_line_inside_a_200_stream(client: OllamaClient, fake: FakeOllama) -> None:
    fake.error_mid_stream = "llama runner process has terminated: signal: killed"
    with pytest.raises(OllamaStreamError) as info:
        client.generate(_request())
    assert info.value.message == ("Ollama reported an error mid-stream: "
                                  "llama runner process has terminated: signal: killed")


def test_stream_that_ends_without_done(client: OllamaClient, fake: FakeOllama) -> None:
    fake.end_without_done = True
    with pytest.raises(OllamaStreamError, match=r'ended without its final chunk \(no "done"\)'):
        client.generate(_request())


def test_timeout_is_configurable(fake: FakeOllama) -> None:
    fake.stall_s = 1.0
    with OllamaClient(fake.url, timeout_s=0.2) as client, pytest.raises(OllamaTimeout) as info:
        client.generate(_request())
    assert "sent nothing for 0.2 s" in info.value.message and "--timeout" in info.value.message


def test_server_killed_mid_stream(client: OllamaClient, fake: FakeOllama) -> None:
    fake.die_after_generates = 1
    with pytest.raises(OllamaStreamError, match="broke mid-response"):
        client.generate(_request())
    with pytest.raises(OllamaUnreachable):
        client.version()


def test_deferred_parsing_keeps_text_order_and_final_piece() -> None:
    lines = [b'{"response":"a","done":false}', b'{"thinking":"b","done":false}',
             b'{"response":"c","done":false}',
             b'{"response":"d","done":true,"done_reason":"stop","total_duration":5,'
             b'"load_duration":1,"eval_count":4,"eval_duration":2}']

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter(line + b"\n" for line in lines))

    with OllamaClient("http://example.invalid", transport=httpx.MockTransport(handler)) as c:
        gen = c.generate(_request())
    assert gen.text == "abcd" and gen.eval_count == 4 and gen.done_reason == "stop"
    assert gen.prompt_eval_count is None and gen.total_duration_ns == 5


def test_not_an_ollama_server() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>hello</html>")

    with OllamaClient("http://example.invalid", transport=httpx.MockTransport(handler)) as c, \
            pytest.raises(OllamaError, match="did not answer with JSON"):
        c.version()


def test_non_json_line_in_stream() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"response":"a","done":false}\nnot json\n'
                                           b'{"response":"","done":true,"eval_count":1}\n')

    with OllamaClient("http://example.invalid", transport=httpx.MockTransport(handler)) as c, \
            pytest.raises(OllamaStreamError, match="not JSON"):
        c.generate(_request())


def test_tls_failure_is_not_called_not_running(fake: FakeOllama) -> None:
    https_url = fake.url.replace("http://", "https://")  # the fake speaks plain HTTP
    with OllamaClient(https_url) as client, pytest.raises(OllamaUnreachable) as info:
        client.version()
    assert info.value.message.startswith(f"the TLS handshake with {https_url} failed")

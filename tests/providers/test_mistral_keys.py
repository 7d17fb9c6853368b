"""Unknown keys and ``stream: true`` in the Mistral fake's batch lines of chat, FIM,
agents, embeddings, moderations and chat moderations, judged by the one check every
endpoint uses (``fake_bodies.refusal``), driven by the real mistralai SDK over HTTP;
and an agent's job on ``/v1/conversations``."""

from __future__ import annotations

import pytest

from mmirage_beam.providers.mistral.fake_bodies import STREAM_REFUSAL
from tests.providers.mistral_jobs import job_lines

mistralai = pytest.importorskip("mistralai.client")

CHAT = {"messages": [{"role": "user", "content": "hello"}]}

#: endpoint -> (model, a good body, {custom_id: (a refused body, the refusal's reason)})
CASES = {
    "/v1/chat/completions": (
        "mistral-small-latest",
        {**CHAT, "max_tokens": 5, "stream": False},
        {
            "extra": (
                {**CHAT, "max_tokens_to_sample": 5},  # Anthropic's legacy name
                "max_tokens_to_sample: Extra inputs are not permitted",
            ),
            "nested": (
                {"messages": [{"role": "user", "content": "hi", "weight": 2}]},
                "messages.0.weight: Extra inputs are not permitted",
            ),
            "stream": ({**CHAT, "stream": True}, STREAM_REFUSAL),
        },
    ),
    "/v1/fim/completions": (
        "codestral-latest",
        {"prompt": "def add(a, b):", "suffix": "return c"},
        {
            "extra": (
                {"prompt": "def f():", "max_tokens_to_sample": 5},
                "max_tokens_to_sample: Extra inputs are not permitted",
            ),
            "stream": ({"prompt": "def f():", "stream": True}, STREAM_REFUSAL),
        },
    ),
    "/v1/embeddings": (
        "mistral-embed",
        {"input": ["one", "two"], "output_dimension": 4},
        {
            "extra": (  # OpenAI's name of Mistral's output_dimension
                {"input": "one", "dimensions": 4},
                "dimensions: Extra inputs are not permitted",
            ),
        },
    ),
    "/v1/moderations": (
        "mistral-moderation-latest",
        {"input": ["one", "two"]},
        {
            "extra": (
                {"input": "one", "max_tokens_to_sample": 5},
                "max_tokens_to_sample: Extra inputs are not permitted",
            ),
        },
    ),
    "/v1/chat/moderations": (
        "mistral-moderation-latest",
        {"input": [{"role": "user", "content": "one"}]},
        {
            "extra": (
                {"input": [{"role": "user", "content": "one"}], "max_tokens_to_sample": 5},
                "max_tokens_to_sample: Extra inputs are not permitted",
            ),
        },
    ),
}


def _run(client, requests: list[dict], **job) -> dict[str, dict]:
    created = client.batch.jobs.create(requests=requests, **job)
    done = client.batch.jobs.get(job_id=created.id)
    assert done.status == "SUCCESS"
    return job_lines(client, done)


@pytest.mark.parametrize("endpoint", list(CASES))
def test_sdk_line_with_an_unknown_key_or_stream_is_refused_on_every_endpoint(
    fake_provider, endpoint
):
    """The good line is answered (200); each line with a key its SDK request type does
    not have, or ``stream: true``, is a 400 line naming the key, in the service's
    words."""
    model, good, refused = CASES[endpoint]
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    requests = [{"custom_id": "good", "body": good}]
    requests += [{"custom_id": cid, "body": body} for cid, (body, _) in refused.items()]
    lines = _run(client, requests, model=model, endpoint=endpoint)
    assert lines["good"]["response"]["status_code"] == 200
    for cid, (_, reason) in refused.items():
        response = lines[cid]["response"]
        assert (response["status_code"], response["body"]["message"]) == (
            400,
            f"Invalid request body: {reason}",
        ), cid


def test_sdk_agent_jobs_refuse_unknown_keys_and_run_conversations(fake_provider):
    """An agent's chat lines (``AgentsCompletionRequest``) refuse an unknown key; a job
    created with ``agent_id`` on ``/v1/conversations`` (``ConversationRequest.agent_id``)
    is answered as its agent (``agent_id`` set, ``model`` null), its unknown keys and
    ``stream: true`` refused the same way; any other endpoint refuses an agent."""
    client = mistralai.Mistral(api_key="k", server_url=fake_provider.mistral_base_url)
    chat = _run(
        client,
        [
            {"custom_id": "good", "body": CHAT},
            {"custom_id": "extra", "body": {**CHAT, "max_tokens_to_sample": 5}},
        ],
        agent_id="ag_0123",
        endpoint="/v1/chat/completions",
    )
    assert chat["good"]["response"]["status_code"] == 200
    assert chat["extra"]["response"]["body"]["message"] == (
        "Invalid request body: max_tokens_to_sample: Extra inputs are not permitted"
    )
    talk = _run(
        client,
        [
            {"custom_id": "good", "body": {"inputs": "Name a colour."}},
            {"custom_id": "extra", "body": {"inputs": "hi", "max_tokens_to_sample": 5}},
            {"custom_id": "stream", "body": {"inputs": "hi", "stream": True}},
        ],
        agent_id="ag_0123",
        endpoint="/v1/conversations",
    )
    answer = mistralai.models.ConversationResponse.model_validate(talk["good"]["response"]["body"])
    (entry,) = answer.outputs
    assert (entry.agent_id, entry.model) == ("ag_0123", None) and entry.content
    assert [talk[k]["response"]["body"]["message"] for k in ("extra", "stream")] == [
        "Invalid request body: max_tokens_to_sample: Extra inputs are not permitted",
        f"Invalid request body: {STREAM_REFUSAL}",
    ]
    assert [j.endpoint for j in client.batch.jobs.list(agent_id="ag_0123").data] == [
        "/v1/conversations",
        "/v1/chat/completions",
    ]
    with pytest.raises(mistralai.errors.SDKError, match="agent_id job runs") as refused:
        client.batch.jobs.create(
            requests=[{"body": {"input": "x"}}], agent_id="ag_0123", endpoint="/v1/embeddings"
        )
    assert refused.value.status_code == 400

"""provider: anthropic: the Files API (beta) through anthropic's ``client.beta.files``
against the embedded fake, beside OpenAI's ``/v1/files`` on the same port."""

from __future__ import annotations

import json

import pytest

anthropic = pytest.importorskip("anthropic")

BETA = ["files-api-2025-04-14"]


def _client(fake):
    return anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)


def test_sdk_upload_list_retrieve_delete_under_the_beta_header(fake_provider):
    """upload, list (newest first, paged on next_page), retrieve_metadata and delete, with
    the files beta header and without it (anthropic 2.14 sends it only when asked); the
    answers are the SDK's FileMetadata and DeletedFile, and a deleted file is 404."""
    client = _client(fake_provider)
    first = client.beta.files.upload(file=("a.txt", b"alpha", "text/plain"), betas=BETA)
    assert (first.type, first.filename, first.mime_type, first.size_bytes) == (
        "file",
        "a.txt",
        "text/plain",
        5,
    )
    assert first.id.startswith("file_") and first.downloadable is False
    second = client.beta.files.upload(file=("b.pdf", b"%PDF-1.4 beta"))  # no beta header
    assert second.mime_type == "application/pdf"
    third = client.beta.files.upload(file=("c.json", b"{}", "application/json"), betas=BETA)
    page = client.beta.files.list(limit=2, betas=BETA)
    assert [f.id for f in page.data] == [third.id, second.id] and page.next_page
    assert [f.id for f in client.beta.files.list(limit=2)] == [third.id, second.id, first.id]
    assert client.beta.files.retrieve_metadata(second.id).size_bytes == len(b"%PDF-1.4 beta")
    deleted = client.beta.files.delete(second.id, betas=BETA)
    assert (deleted.id, deleted.type) == (second.id, "file_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(second.id)
    assert [f.id for f in client.beta.files.list()] == [third.id, first.id]
    counts = fake_provider.call_counts()
    assert counts["anthropic_files_upload"] == 3
    assert counts["anthropic_files_list"] == 4  # one page, two pages, one page


def test_sdk_download_only_what_the_service_made_and_until_it_expires():
    """An uploaded file is not downloadable (400, as the files guide says); a file the
    service made (a skill's output: add_generated) downloads, until its expiry."""
    from mmirage_beam.testing import FakeProviderServer

    clock = [1000.0]
    with FakeProviderServer(clock=lambda: clock[0]) as fake:
        client = _client(fake)
        uploaded = client.beta.files.upload(
            file=("a.txt", b"alpha", "text/plain"), expires_in_seconds=60, betas=BETA
        )
        assert uploaded.expires_at is not None
        with pytest.raises(anthropic.BadRequestError, match="not downloadable"):
            client.beta.files.download(uploaded.id, betas=BETA)
        made = fake.registered_fake("anthropic").files_api.add_generated(
            "report.csv", b"a,b\n1,2\n"
        )
        meta = client.beta.files.retrieve_metadata(made, betas=BETA)
        assert meta.downloadable is True and meta.mime_type == "text/csv"
        assert client.beta.files.download(made, betas=BETA).read() == b"a,b\n1,2\n"
        fake.registered_fake("anthropic").files_api.files[made].expires_at = clock[0] + 10
        clock[0] += 11
        with pytest.raises(anthropic.NotFoundError, match="expired"):
            client.beta.files.download(made)


def test_openai_files_on_the_same_port_are_untouched(fake_provider):
    """openai's /v1/files (no anthropic-version, no files beta) still reaches the OpenAI
    fake, and each provider lists only its own files; a scripted leading error on an
    Anthropic files call answers in Anthropic's error shape."""
    import httpx
    import openai

    fake = fake_provider
    oai = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url)
    line = {
        "custom_id": "o1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    }
    oai_file = oai.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    client = _client(fake)
    ant_file = client.beta.files.upload(file=("a.txt", b"alpha", "text/plain"), betas=BETA)
    assert [f.id for f in oai.files.list()] == [oai_file.id]
    assert [f.id for f in client.beta.files.list()] == [ant_file.id]
    assert oai.files.retrieve(oai_file.id).purpose == "batch"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(oai_file.id)
    no_key = httpx.get(f"{fake.base_url}/v1/files", headers={"anthropic-beta": BETA[0]})
    assert no_key.status_code == 401 and no_key.json()["error"]["type"] == "authentication_error"
    fake.script(leading_errors={"count": 1, "status": 529, "paths": ["anthropic_files_upload"]})
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.with_options(max_retries=0).beta.files.upload(file=("b.txt", b"b"), betas=BETA)
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["type"] == "error"

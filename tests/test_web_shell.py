"""The HTML shells the browser bundle mounts into."""

from __future__ import annotations

import json
import re

import httpx

from tests.serverproc import ServerProcess


def test_the_editor_shell_carries_the_document_name_as_script_safe_json(server: ServerProcess):
    response = httpx.get(server.http_url + "/d/notes%3C/script%3E%3Cb%3E%20%F0%9F%98%80")
    assert response.status_code == 200
    body = response.text
    assert "</script><b>" not in body  # the name cannot close the script element
    config = json.loads(re.search(r"window\.TETHER = (\{.*?\});</script>", body).group(1))
    assert config == {
        "auth": "jwt",
        "document": "notes</script><b> 😀",
        "ai": False,
        "base": "",
        "fragment": "default",
        "local": True,
    }
    assert 'src="/static/editor.js"' in body


def test_the_index_shell_loads_the_index_bundle(server: ServerProcess):
    response = httpx.get(server.http_url + "/")
    assert response.status_code == 200
    assert 'src="/static/index.js"' in response.text


def test_a_control_character_in_a_document_name_is_refused(server: ServerProcess):
    assert httpx.get(server.http_url + "/d/bad%01name").status_code == 400


def test_the_service_worker_is_served_at_the_root_of_the_pages_and_never_cached(
    server: ServerProcess,
):
    response = httpx.get(server.http_url + "/sw.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.headers["cache-control"] == "no-cache"
    assert "tether-shell-" in response.text  # the build's cache, named by its version

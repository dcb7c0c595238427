"""The OpenAPI 3.1 description of tether's HTTP API, written by hand as one dict.

Hand-written rather than generated: the API is a dozen operations whose handlers parse their
own input (bytes, query flags, SSE), so a generator would need a schema layer bigger than this
file, and the description would still have to be checked against real answers. That check is
``tests/test_rest_documents.py``: it validates the server's actual responses against the
schemas below (OpenAPI 3.1 schemas are JSON Schema 2020-12), so the two cannot drift silently.

Knows nothing of Starlette; ``description(base)`` fills in where tether is mounted.
"""

from __future__ import annotations

from typing import Any

from ..version import VERSION


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "bad input: an invalid name, format, body or version number; a malformed update;"
        " a body that is not JSON (application/json) or not Base64 (PATCH format=base64)",
        401: "missing, invalid or expired token",
        403: "the token does not allow this document, or is readonly where writing is asked",
        404: "no such document (never stored, not loaded with content) or version",
        409: "the document is quarantined, or a version limit is reached, or (duplicate) a"
        " document of the new name exists",
        413: "body larger than the frame cap (max_frame_bytes), or Markdown or HTML larger than"
        " max_markdown_bytes or max_html_bytes",
        415: "wrong Content-Type",
        422: "the update guard refused the update (nesting, dependencies, origins); the"
        " Markdown, HTML or ProseMirror JSON makes more than max_import_nodes nodes or nests"
        " deeper than max_nesting_depth allows; the JSON is not a ProseMirror document (a node"
        " type that is not a name, an attribute out of range: a heading's level 1-6, an ordered"
        " list's start, a code block's language); a PATCH node not found (the error names the"
        " limit; nothing applied)",
        429: "too many requests from this client address (rest_rate_limit per"
        " rest_rate_window): try again after Retry-After seconds",
        501: "the store keeps no versions",
        503: "the document is busy or could not be stored, or the worker pool this needs is"
        " full (imports, renders, loads), or the Markdown imports in flight hold the"
        " import_memory_budget: try again after Retry-After seconds",
    }
    return {str(s): _json("Error", reasons[s]) for s in statuses}


_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The document name; may contain '/' (e.g. notes/today); 1-512 characters,"
    " no control characters; percent-encode what a URL path cannot hold",
    "schema": {"type": "string", "minLength": 1, "maxLength": 512},
}
_FORMAT = {
    "name": "format",
    "in": "query",
    "required": False,
    "description": "info (default: name, kind, text and peers); json (the ProseMirror tree,"
    " {type: doc, content}, as Tiptap's editor.getJSON() gives it; a plain document as one"
    " paragraph per line); text (text/plain: a rich document's blocks separated by blank"
    " lines); markdown (a rich document's tree as Markdown; a plain document's text as it is,"
    " since editors write Markdown there); html (an escaped HTML fragment, as an attachment);"
    " yjs (the full Yjs update, for backups and PUT)",
    "schema": {
        "type": "string",
        "enum": ["info", "json", "text", "markdown", "html", "yjs"],
        "default": "info",
    },
}
_EXPORTS = {
    "text/plain": {"schema": {"type": "string"}},
    "text/markdown": {"schema": {"type": "string"}},
    "text/html": {"schema": {"type": "string"}},
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
}
_BEARER = [{"bearer": []}]
_KIND = {
    "type": "string",
    "enum": ["rich", "plain"],
    "description": "rich: the Y.XmlFragment named by --rich-fragment holds a tree (Tiptap,"
    ' y-prosemirror); plain: the Y.Text "content"',
}

_MARK = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}, "attrs": {"type": "object"}},
}

SCHEMAS: dict[str, Any] = {
    "ProseMirrorDoc": {
        "type": "object",
        "description": "A ProseMirror document as Tiptap's editor.getJSON() gives it",
        "required": ["type", "content"],
        "properties": {
            "type": {"const": "doc"},
            "content": {"type": "array", "items": _ref("ProseMirrorNode")},
        },
    },
    "ProseMirrorNode": {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"type": "string", "description": "the schema's node name, or text"},
            "attrs": {"type": "object"},
            "content": {"type": "array", "items": _ref("ProseMirrorNode")},
            "text": {"type": "string", "minLength": 1},
            "marks": {"type": "array", "items": _MARK},
        },
    },
    "DuplicateRequest": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 512}},
    },
    "Duplicated": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "source"],
        "properties": {"name": {"type": "string"}, "source": {"type": "string"}},
    },
    "VersionDeleted": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "id", "deleted"],
        "properties": {
            "name": {"type": "string"},
            "id": {"type": "integer"},
            "deleted": {"const": True},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
    },
    "Health": {
        "type": "object",
        "required": ["status", "version", "documents_loaded", "ai"],
        "properties": {
            # degraded: the database is unreachable (edits wait) or AI is (sync serves)
            "status": {"enum": ["ok", "degraded"]},
            "version": {"type": "string"},
            "documents_loaded": {"type": "integer", "minimum": 0},
            "ai": {"type": "object", "required": ["state"]},
        },
    },
    "DocumentList": {
        "type": "object",
        "required": ["documents", "next"],
        "properties": {
            # The cursor of the next page (?after=), null on the last one.
            "next": {"type": ["string", "null"]},
            "documents": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "created_at", "updated_at", "stored_bytes", "loaded"],
                    "properties": {
                        "name": {"type": "string"},
                        "created_at": {"type": "number"},
                        "updated_at": {"type": "number"},
                        "stored_bytes": {"type": "integer", "minimum": 0},
                        "loaded": {"type": "boolean"},
                    },
                },
            },
        },
    },
    "Document": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "kind", "text", "peers"],
        "properties": {
            "name": {"type": "string"},
            "kind": _KIND,
            "text": {"type": "string", "description": "the plain text, whichever kind"},
            "peers": {"type": "integer", "minimum": 0, "description": "editors attached now"},
        },
    },
    "Deleted": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "deleted"],
        "properties": {"name": {"type": "string"}, "deleted": {"const": True}},
    },
    "Imported": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "imported"],
        "properties": {"name": {"type": "string"}, "imported": {"const": True}},
    },
    "Version": {
        "type": "object",
        "required": ["id", "label", "created_at", "size"],
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "label": {"type": "string", "minLength": 1, "maxLength": 200},
            "created_at": {"type": "number", "description": "unix seconds"},
            "size": {"type": "integer", "minimum": 0, "description": "bytes of saved state"},
        },
    },
    "VersionWithText": {
        "allOf": [
            _ref("Version"),
            {
                "type": "object",
                "required": ["kind", "text"],
                "properties": {"kind": _KIND, "text": {"type": "string"}},
            },
        ]
    },
    "VersionList": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "versions"],
        "properties": {
            "name": {"type": "string"},
            "versions": {"type": "array", "items": _ref("Version")},
        },
    },
    "NewVersion": {
        "type": "object",
        "required": ["label"],
        "properties": {"label": {"type": "string", "minLength": 1, "maxLength": 200}},
    },
    "RestoreRequest": {
        "type": "object",
        "required": ["version"],
        "properties": {"version": {"type": "integer", "minimum": 1}},
    },
    "Restored": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "restored", "text"],
        "properties": {
            "name": {"type": "string"},
            "restored": {"type": "integer"},
            "text": {"type": "string", "description": "the document's text after the restore"},
        },
    },
}

_IMPORT: dict[str, Any] = {
    "summary": "Import a Yjs update, a ProseMirror document, HTML, Markdown or plain text as one"
    " CRDT change (connected editors follow)",
    "description": "application/octet-stream: a Yjs update, checked by the update guard exactly"
    " as a /ws update is. application/json: a ProseMirror document (what Tiptap's"
    " editor.getJSON() gives); any node type named like a Tiptap extension is kept, with its"
    " attributes. text/html: StarterKit's elements and marks; scripts, event handlers and"
    " javascript: links are dropped. text/markdown: Tiptap StarterKit nodes and marks. These"
    " three replace the rich tree (--rich-fragment). text/plain: the plain text (Y.Text"
    " content) becomes the body, changing only the part that differs. At most"
    " max_frame_bytes (Markdown max_markdown_bytes, HTML max_html_bytes). A new name is"
    " created. PUT and POST are the same.",
    "requestBody": {
        "required": True,
        "content": {
            "application/octet-stream": {"schema": {"type": "string"}},
            "application/json": {"schema": _ref("ProseMirrorDoc")},
            "text/html": {"schema": {"type": "string"}},
            "text/markdown": {"schema": {"type": "string"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    },
    "responses": {
        "200": _json("Imported", "applied and durable"),
        **_errors(400, 401, 403, 409, 413, 415, 422, 429, 503),
    },
}

_PATCH: dict[str, Any] = {
    "summary": "Apply content while others type, as Tiptap Cloud's PATCH (one CRDT change)",
    "description": "format=json: a ProseMirror document; only its top-level blocks that differ"
    " from the document's (between those both share at the start and at the end) replace the"
    " document's, so what editors type elsewhere stays. mode=append: the body's nodes (a"
    " document, one node or a list) go after the last block. nodeAttributeName and"
    " nodeAttributeValue: the first node whose attribute has that value (as Tiptap's UniqueID"
    " extension names nodes) is replaced by the body's nodes. format=binary: a Yjs update;"
    " format=base64: a Yjs update in Base64. Without format, application/json is json and"
    " application/octet-stream binary. The document must exist (PUT creates one).",
    "parameters": [
        {
            "name": "format",
            "in": "query",
            "schema": {"type": "string", "enum": ["json", "binary", "base64"]},
        },
        {
            "name": "mode",
            "in": "query",
            "schema": {"type": "string", "enum": ["default", "append"]},
        },
        {"name": "nodeAttributeName", "in": "query", "schema": {"type": "string"}},
        {"name": "nodeAttributeValue", "in": "query", "schema": {"type": "string"}},
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "text/plain": {"schema": {"type": "string", "description": "format=base64"}},
        },
    },
    "responses": {
        "204": {"description": "applied and durable"},
        **_errors(400, 401, 403, 404, 409, 413, 422, 429, 503),
    },
}

PATHS: dict[str, Any] = {
    "/health": {
        "get": {
            "summary": "Liveness, version, loaded documents and the AI's state (details such as"
            " the model file and the worker's pid for loopback or the metrics token only)",
            "security": [],
            "responses": {"200": _json("Health", "the server is up")},
        }
    },
    "/ready": {
        "get": {
            "summary": "/health's body for health checks: 503 while the status is 'degraded'"
            " (the database unavailable, or AI degraded)",
            "security": [],
            "responses": {
                "200": _json("Health", "ready"),
                "503": _json("Health", "degraded"),
            },
        }
    },
    "/api/documents": {
        "get": {
            "summary": "The stored documents this token may open, a page at a time",
            "parameters": [
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1000},
                },
                {
                    "name": "after",
                    "in": "query",
                    "description": "the last name of the previous page (its 'next')",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": _json("DocumentList", "sorted by name"),
                **_errors(400, 401, 429),
            },
        }
    },
    "/api/documents/{name}": {
        "parameters": [_NAME],
        "get": {
            "summary": "Read or export a document (never loads an unknown name)",
            "parameters": [_FORMAT],
            "responses": {
                "200": {
                    "description": "the document (info), its ProseMirror tree (json) or its export",
                    "content": {
                        "application/json": {
                            "schema": {"oneOf": [_ref("Document"), _ref("ProseMirrorDoc")]}
                        },
                        **_EXPORTS,
                    },
                },
                **_errors(400, 401, 403, 404, 409, 429, 503),
            },
        },
        "put": _IMPORT,
        "post": _IMPORT,
        "patch": _PATCH,
        "delete": {
            "summary": "Delete the document, its versions and its cached suggestions",
            "description": "Editors connected to it are told: on /ws the channel gets"
            " PermissionDenied 'document deleted', a /yjs socket is closed with 4410. A later"
            " open starts a fresh empty document. Needs a read-write token.",
            "responses": {
                "200": _json("Deleted", "deleted"),
                **_errors(400, 401, 403, 404, 429),
            },
        },
    },
    "/api/duplicate/{name}": {
        "parameters": [_NAME],
        "post": {
            "summary": "Copy the document's state into a new document",
            "description": "The body names the copy. Needs the document readable and the new"
            " name writable by the token; 409 if the new name holds a document already. Named"
            " versions are not copied. (Tiptap Cloud has no such call: its scripts GET"
            " ?format=yjs and POST it under the new name, which works here too.)",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("DuplicateRequest")}},
            },
            "responses": {
                "201": _json("Duplicated", "copied and durable"),
                **_errors(400, 401, 403, 404, 409, 413, 415, 422, 429, 503),
            },
        },
    },
    "/api/versions/{name}": {
        "parameters": [_NAME],
        "get": {
            "summary": "List the document's named versions, or (with id) get one",
            "parameters": [
                {"name": "id", "in": "query", "required": False, "schema": {"type": "integer"}},
                _FORMAT,
            ],
            "responses": {
                "200": {
                    "description": "the list (no id), or one version (info), its ProseMirror"
                    " tree (json) or its export",
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    _ref("VersionList"),
                                    _ref("VersionWithText"),
                                    _ref("ProseMirrorDoc"),
                                ]
                            }
                        },
                        **_EXPORTS,
                    },
                },
                **_errors(400, 401, 403, 404, 429, 501, 503),
            },
        },
        "delete": {
            "summary": "Delete one named version (?id=); its bytes leave the version quotas",
            "parameters": [
                {"name": "id", "in": "query", "required": True, "schema": {"type": "integer"}}
            ],
            "responses": {
                "200": _json("VersionDeleted", "deleted"),
                **_errors(400, 401, 403, 404, 429, 501),
            },
        },
        "post": {
            "summary": "Save the document's current state as a named version",
            "description": "Bounded per document by max_versions_per_document and"
            " max_version_bytes_per_document, per token subject by"
            " max_version_bytes_per_subject and in all by max_version_bytes_total (409 past"
            " them). A document unchanged since its last version gets that version (200), not"
            " a copy. Needs a read-write token.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("NewVersion")}},
            },
            "responses": {
                "201": _json("Version", "saved"),
                "200": _json("Version", "unchanged since this, its last version"),
                **_errors(400, 401, 403, 404, 409, 413, 415, 429, 501, 503),
            },
        },
    },
    "/api/restore/{name}": {
        "parameters": [_NAME],
        "post": {
            "summary": "Make the text equal a saved version's, as one new CRDT change",
            "description": "Not a rewind: history is kept and connected editors follow."
            " Needs a read-write token.",
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref("RestoreRequest")}},
            },
            "responses": {
                "200": _json("Restored", "restored and durable"),
                **_errors(400, 401, 403, 404, 409, 413, 415, 429, 501, 503),
            },
        },
    },
    "/api/suggest": {
        "post": {
            "summary": "An AI suggestion as server-sent events (see protocol/PROTOCOL.md)",
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["doc"],
                            "properties": {"doc": {"type": "string"}, "text": {"type": "string"}},
                        }
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "the suggestion's messages as SSE `data:` lines",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **_errors(400, 401, 403, 415),
                "503": _json("Error", "AI suggestions are off"),
            },
        }
    },
}


def description(base: str = "") -> dict[str, Any]:
    """The OpenAPI document for a server mounted at ``base`` ("" at the root)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tether",
            "version": VERSION,
            "description": "Documents over REST. Sync and AI suggestions are on the /ws"
            " WebSocket (protocol/PROTOCOL.md), plain y-websocket on /yjs/{name}.",
        },
        "servers": [{"url": base or "/"}],
        "security": _BEARER,
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "a token from `tether token` (any string with --auth none)",
                }
            },
        },
    }

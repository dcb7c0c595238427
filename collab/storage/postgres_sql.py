"""The SQL that ``collab.storage.postgres`` runs: the schema and its migrations, the write
path's statements and the reads. Statements only: when and with what they run is postgres.py's.
"""

from __future__ import annotations

# A batch of appends only (the hot path) is ONE statement, so ONE round trip, committed on its
# own: the document rows are locked from FOR UPDATE to COMMIT and no longer, which is what
# bounds how fast nodes writing the same document can take turns.
# p_epochs: per update, the incarnation it belongs to (> 0: exactly that epoch) or, < = 0, any
# incarnation above -p_epoch (created now if none exists). An update whose incarnation is gone
# comes back with seq 0 and is not stored.
APPEND_FUNCTION = """CREATE OR REPLACE FUNCTION tether_append(
        p_names text[], p_datas bytea[], p_epochs bigint[], p_now double precision)
    RETURNS TABLE (ord bigint, seq bigint, entries bigint, epoch bigint) LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO tether_documents (name, created_at, updated_at)
            SELECT DISTINCT t.n, p_now, p_now FROM unnest(p_names, p_epochs) AS t(n, e)
            WHERE t.e <= 0 ORDER BY 1
            ON CONFLICT (name) DO NOTHING;
        PERFORM 1 FROM tether_documents WHERE name = ANY(p_names) ORDER BY name FOR UPDATE;
        RETURN QUERY
        WITH input AS (
            SELECT t.n, t.d, t.e, t.o
            FROM unnest(p_names, p_datas, p_epochs) WITH ORDINALITY AS t(n, d, e, o)
        ), numbered AS (
            SELECT i.n, i.d, i.o, doc.epoch AS g,
                doc.last_seq + row_number() OVER w AS s,
                doc.log_entries + row_number() OVER w AS e
            FROM input AS i JOIN tether_documents AS doc ON doc.name = i.n
            WHERE (i.e > 0 AND doc.epoch = i.e) OR (i.e <= 0 AND doc.epoch > -i.e)
            WINDOW w AS (PARTITION BY i.n ORDER BY i.o)
        ), inserted AS (
            INSERT INTO tether_updates (name, seq, data) SELECT n, s, d FROM numbered
        ), saved AS (
            UPDATE tether_documents AS doc
            SET last_seq = m.s, log_entries = m.e, log_bytes = doc.log_bytes + m.b,
                updated_at = p_now
            FROM (SELECT n, max(s) AS s, max(e) AS e, sum(length(d)) AS b
                  FROM numbered GROUP BY n) AS m
            WHERE doc.name = m.n
        )
        SELECT input.o, COALESCE(numbered.s, 0), COALESCE(numbered.e, 0),
            COALESCE(numbered.g, 0)
        FROM input LEFT JOIN numbered ON numbered.o = input.o ORDER BY input.o;
    END $$"""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tether_documents (
        name TEXT PRIMARY KEY,
        snapshot BYTEA,
        snapshot_seq BIGINT NOT NULL DEFAULT 0,
        last_seq BIGINT NOT NULL DEFAULT 0,
        log_entries BIGINT NOT NULL DEFAULT 0,
        log_bytes BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS tether_updates (
        name TEXT NOT NULL,
        seq BIGINT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (name, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS tether_versions (
        id BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL,
        label TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        data BYTEA NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS tether_versions_by_name ON tether_versions (name, id)",
    # Who made each version, for its byte quota.
    "ALTER TABLE tether_versions ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX IF NOT EXISTS tether_versions_by_subject ON tether_versions (subject)",
    # Schema 2: incarnations (see the module docstring).
    "CREATE SEQUENCE IF NOT EXISTS tether_epochs",
    """ALTER TABLE tether_documents
        ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT nextval('tether_epochs')""",
    """CREATE TABLE IF NOT EXISTS tether_tombstones (
        name TEXT PRIMARY KEY,
        epoch BIGINT NOT NULL
    )""",
    "DROP FUNCTION IF EXISTS tether_append(text[], bytea[], double precision)",
    APPEND_FUNCTION,
)

# Schema 3: the version bytes per token subject (everyone = false) and of every version (the
# one row with everyone = true), kept by whatever inserts or deletes versions, in its own
# transaction. Every version insert updates the everyone row, so versions taken at once on any
# nodes take turns on it until each commits: acceptable, versions are rare and each insert is
# one short statement. Rows are locked subjects first, in order, then the everyone row, so two
# writers cannot deadlock on them.
VERSION_TOTALS = """CREATE TABLE tether_version_totals (
        everyone BOOLEAN NOT NULL,
        subject TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        PRIMARY KEY (everyone, subject)
    )"""
BACKFILL_VERSION_TOTALS = """INSERT INTO tether_version_totals (everyone, subject, bytes)
    SELECT false, subject, SUM(LENGTH(data)) FROM tether_versions GROUP BY subject
    UNION ALL SELECT true, '', COALESCE(SUM(LENGTH(data)), 0) FROM tether_versions"""
# Adds each (subject, bytes) of {changes} to its subject's row and their sum to everyone's.
COUNT_VERSIONS = """INSERT INTO tether_version_totals (everyone, subject, bytes)
    SELECT false, c.subject, c.bytes FROM {changes}
    UNION ALL SELECT true, '', SUM(c.bytes) FROM {changes} HAVING COUNT(*) > 0
    ORDER BY 1, 2
    ON CONFLICT (everyone, subject)
    DO UPDATE SET bytes = tether_version_totals.bytes + excluded.bytes"""
ADD_VERSION = (
    """WITH added AS (
        INSERT INTO tether_versions (name, label, created_at, data, subject)
        VALUES ($1, $2, $3, $4, $5) RETURNING id, subject, LENGTH(data)::bigint AS bytes
    ), counted AS ("""
    + COUNT_VERSIONS.format(changes="added AS c")
    + """)
    SELECT id FROM added"""
)
# One version forgotten, and its bytes taken off its subject's total and everyone's, in one
# statement (so one transaction); yields how many went (0 or 1).
DELETE_VERSION = (
    """WITH gone AS (
        DELETE FROM tether_versions WHERE name = $1 AND id = $2
        RETURNING subject, -LENGTH(data)::bigint AS bytes
    ), counted AS ("""
    + COUNT_VERSIONS.format(changes="gone AS c")
    + """)
    SELECT COUNT(*) FROM gone"""
)
# What deleting a document's versions frees, per subject: counted at the end of the batch.
DELETE_VERSIONS = """WITH gone AS (
        DELETE FROM tether_versions WHERE name = $1 RETURNING subject, LENGTH(data) AS bytes
    ) SELECT subject, SUM(bytes)::bigint AS bytes FROM gone GROUP BY subject"""
UNCOUNT_VERSIONS = COUNT_VERSIONS.format(
    changes="unnest($1::text[], $2::bigint[]) AS c(subject, bytes)"
)

CREATE_ROWS = """INSERT INTO tether_documents (name, created_at, updated_at)
    SELECT n, $2, $2 FROM unnest($1::text[]) AS n ORDER BY n
    ON CONFLICT (name) DO NOTHING"""
LOCK_ROWS = """SELECT name, last_seq, snapshot_seq, log_entries, log_bytes, epoch
    FROM tether_documents WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE"""
INSERT_UPDATES = """INSERT INTO tether_updates (name, seq, data)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])"""
SAVE_ROW = """UPDATE tether_documents SET last_seq = $2, snapshot_seq = $3, log_entries = $4,
    log_bytes = $5, updated_at = $6 WHERE name = $1"""
# Names compare and sort by code point (COLLATE "C"), as in SQLite and in memory, whatever the
# database's locale: a page's cursor means the same on every store.
INFO = """SELECT name, created_at, updated_at, log_entries,
        COALESCE(LENGTH(snapshot), 0) + log_bytes
    FROM tether_documents {where} ORDER BY name COLLATE "C"
"""
INFO_OF = INFO.format(where="WHERE name = $1")
# A page of the listing: names after the cursor and from the prefix on, below its end if any.
PAGE_FROM = 'WHERE name COLLATE "C" > $1 AND name COLLATE "C" >= $2'
PAGE_BELOW = ' AND name COLLATE "C" < $3'

# Reads and the write path's single statements.
LOAD_ROW = "SELECT snapshot, snapshot_seq, epoch FROM tether_documents WHERE name = $1"
LOAD_LOG = "SELECT seq, data FROM tether_updates WHERE name = $1 ORDER BY seq"
TOMBSTONE = "SELECT epoch FROM tether_tombstones WHERE name = $1"
BACKFILL_ROW = (
    "SELECT snapshot_seq, epoch,"
    " CASE WHEN snapshot_seq > $2 THEN snapshot END AS snap"
    " FROM tether_documents WHERE name = $1"
)
BACKFILL_LOG = "SELECT seq, data FROM tether_updates WHERE name = $1 AND seq > $2 ORDER BY seq"
HEADS = "SELECT name, last_seq FROM tether_documents WHERE name = ANY($1::text[])"
GENERATIONS = "SELECT name, epoch, last_seq FROM tether_documents WHERE name = ANY($1::text[])"
VERSION_BYTES = "SELECT bytes FROM tether_version_totals WHERE everyone = $1 AND subject = $2"
LIST_VERSIONS = (
    "SELECT id, name, label, created_at, LENGTH(data) AS size FROM tether_versions"
    " WHERE name = $1 ORDER BY id"
)
LOAD_VERSION = "SELECT data FROM tether_versions WHERE name = $1 AND id = $2"
PING = "SELECT 1"
DELETE_LOG = "DELETE FROM tether_updates WHERE name = $1"
DELETE_ROW = "DELETE FROM tether_documents WHERE name = $1"
BURY = (
    "INSERT INTO tether_tombstones (name, epoch) VALUES ($1, $2)"
    " ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch"
)
APPEND = (
    "SELECT ord, seq, entries, epoch FROM tether_append($1::text[], $2::bytea[], $3::bigint[], $4)"
)
RECREATE = (
    "INSERT INTO tether_documents (name, created_at, updated_at) VALUES ($1, $2, $2)"
    " RETURNING epoch"
)
SET_SNAPSHOT = "UPDATE tether_documents SET snapshot = $2 WHERE name = $1"
FOLD_LOG = (
    "WITH gone AS (DELETE FROM tether_updates WHERE name = $1 AND seq <= $2 RETURNING 1)"
    " SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(u.data)), 0) AS bytes"
    " FROM tether_updates AS u WHERE u.name = $1 AND u.seq > $2"
)
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('tether-schema'))"
HAS_VERSION_TOTALS = "SELECT to_regclass('tether_version_totals')"
SCHEMA_READ = "SELECT value FROM tether_meta WHERE key = 'schema'"
SCHEMA_WRITE = (
    "INSERT INTO tether_meta (key, value) VALUES ('schema', $1)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

-- Content-marketing pipeline: SQLite schema (14 tables).
--
-- Flow, one Ralph story at a time:
--   1. Inputs (seeded):  founder_content, competitor_content, trends, research,
--      communications, voice_profile; content_patterns are lessons mined from the
--      founder's or competitors' pieces.
--   2. research_briefs   turn a trend and/or a research source into a question + findings.
--   3. content_ideas     are proposed from a complete brief, in an optional voice profile.
--   4. content_plan      schedules an approved idea on one channel.
--   5. drafts            are written (versioned) for a plan slot; critique_results judge them.
--   6. published         records where an approved draft went live.
--   agent_log            is the agent's own trail, tagged with the PRD story id as text.
--
-- Foreign-key enforcement is switched on by the connection that opens the database, not here.
-- ON DELETE policy: RESTRICT wherever a row is evidence or history that must not vanish
-- silently (sources behind a brief, the brief behind an idea, what was published);
-- CASCADE only where the child is derived from the parent and meaningless without it
-- (patterns of a source piece, drafts of a plan slot, critiques of a draft).
-- Timestamps are ISO-8601 text in UTC, as produced by datetime('now').

------------------------------------------------------------------------------------------
-- Stage 1: inputs
------------------------------------------------------------------------------------------

CREATE TABLE founder_content (
    id            INTEGER PRIMARY KEY,
    title         TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    format        TEXT    NOT NULL
                  CHECK (format IN ('post', 'essay', 'talk', 'podcast', 'newsletter')),
    body          TEXT    NOT NULL CHECK (length(trim(body)) > 0),
    url           TEXT    UNIQUE CHECK (url IS NULL OR url LIKE 'https://%'),
    published_on  TEXT,   -- YYYY-MM-DD, NULL for unpublished notes
    created_at    TEXT    NOT NULL DEFAULT (datetime('now'))
);

CREATE TABLE competitor_content (
    id            INTEGER PRIMARY KEY,
    competitor    TEXT    NOT NULL CHECK (length(trim(competitor)) > 0),
    title         TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    url           TEXT    NOT NULL UNIQUE CHECK (url LIKE 'https://%'),
    channel       TEXT    NOT NULL
                  CHECK (channel IN ('blog', 'newsletter', 'linkedin', 'x', 'video', 'podcast')),
    summary       TEXT,
    engagement    INTEGER NOT NULL DEFAULT 0 CHECK (engagement >= 0),
    published_on  TEXT,
    created_at    TEXT    NOT NULL DEFAULT (datetime('now'))
);

CREATE TABLE trends (
    id            INTEGER PRIMARY KEY,
    topic         TEXT    NOT NULL CHECK (length(trim(topic)) > 0),
    description   TEXT    NOT NULL,
    momentum      INTEGER NOT NULL CHECK (momentum BETWEEN 1 AND 5),  -- 5 = rising fast
    source_url    TEXT    CHECK (source_url IS NULL OR source_url LIKE 'https://%'),
    observed_on   TEXT    NOT NULL,
    created_at    TEXT    NOT NULL DEFAULT (datetime('now'))
);

CREATE TABLE research (
    id            INTEGER PRIMARY KEY,
    title         TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    source_type   TEXT    NOT NULL
                  CHECK (source_type IN ('report', 'survey', 'article', 'interview', 'dataset')),
    summary       TEXT    NOT NULL CHECK (length(trim(summary)) > 0),
    source_url    TEXT    NOT NULL CHECK (source_url LIKE 'https://%'),
    credibility   INTEGER NOT NULL CHECK (credibility BETWEEN 1 AND 5),
    created_at    TEXT    NOT NULL DEFAULT (datetime('now'))
);

-- Customer and team messages: the raw material for questions people actually ask.
CREATE TABLE communications (
    id            INTEGER PRIMARY KEY,
    channel       TEXT    NOT NULL
                  CHECK (channel IN ('email', 'support', 'call', 'chat', 'community')),
    sender        TEXT    NOT NULL CHECK (length(trim(sender)) > 0),
    subject       TEXT,
    body          TEXT    NOT NULL CHECK (length(trim(body)) > 0),
    sentiment     TEXT    NOT NULL DEFAULT 'neutral'
                  CHECK (sentiment IN ('positive', 'neutral', 'negative')),
    received_at   TEXT    NOT NULL,
    created_at    TEXT    NOT NULL DEFAULT (datetime('now'))
);

CREATE TABLE voice_profile (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL UNIQUE CHECK (length(trim(name)) > 0),
    audience        TEXT    NOT NULL,
    tone            TEXT    NOT NULL,
    do_rules        TEXT    NOT NULL,  -- one rule per line
    dont_rules      TEXT    NOT NULL,  -- one rule per line
    sample_phrases  TEXT,
    is_active       INTEGER NOT NULL DEFAULT 0 CHECK (is_active IN (0, 1)),
    created_at      TEXT    NOT NULL DEFAULT (datetime('now'))
);
-- At most one active voice at a time.
CREATE UNIQUE INDEX voice_profile_one_active ON voice_profile (is_active) WHERE is_active = 1;

-- A reusable pattern mined from exactly one piece, the founder's or a competitor's.
-- CASCADE: a pattern is derived from its source piece and goes with it.
CREATE TABLE content_patterns (
    id                     INTEGER PRIMARY KEY,
    competitor_content_id  INTEGER REFERENCES competitor_content (id) ON DELETE CASCADE,
    founder_content_id     INTEGER REFERENCES founder_content (id) ON DELETE CASCADE,
    pattern_type           TEXT    NOT NULL
                           CHECK (pattern_type IN ('hook', 'structure', 'format', 'cta', 'topic')),
    description            TEXT    NOT NULL CHECK (length(trim(description)) > 0),
    created_at             TEXT    NOT NULL DEFAULT (datetime('now')),
    CHECK ((competitor_content_id IS NULL) <> (founder_content_id IS NULL))
);
CREATE INDEX content_patterns_competitor_content_id ON content_patterns (competitor_content_id);
CREATE INDEX content_patterns_founder_content_id ON content_patterns (founder_content_id);

------------------------------------------------------------------------------------------
-- Stage 2+: filled by the agent, story by story
------------------------------------------------------------------------------------------

-- States: open -> complete. A complete brief must carry its findings.
-- RESTRICT: a trend or source cannot be deleted while a brief cites it.
CREATE TABLE research_briefs (
    id            INTEGER PRIMARY KEY,
    trend_id      INTEGER REFERENCES trends (id) ON DELETE RESTRICT,
    research_id   INTEGER REFERENCES research (id) ON DELETE RESTRICT,
    title         TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    question      TEXT    NOT NULL CHECK (length(trim(question)) > 0),
    findings      TEXT,
    status        TEXT    NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'complete')),
    completed_at  TEXT,
    created_at    TEXT    NOT NULL DEFAULT (datetime('now')),
    CHECK (trend_id IS NOT NULL OR research_id IS NOT NULL),
    CHECK (status = 'open' OR length(trim(coalesce(findings, ''))) > 0)
);
CREATE INDEX research_briefs_trend_id ON research_briefs (trend_id);
CREATE INDEX research_briefs_research_id ON research_briefs (research_id);

-- States: proposed -> approved -> planned, or proposed -> rejected.
-- RESTRICT: an idea keeps its brief (its evidence) and its voice.
CREATE TABLE content_ideas (
    id                INTEGER PRIMARY KEY,
    brief_id          INTEGER NOT NULL REFERENCES research_briefs (id) ON DELETE RESTRICT,
    voice_profile_id  INTEGER REFERENCES voice_profile (id) ON DELETE RESTRICT,
    title             TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    angle             TEXT    NOT NULL CHECK (length(trim(angle)) > 0),
    status            TEXT    NOT NULL DEFAULT 'proposed'
                      CHECK (status IN ('proposed', 'approved', 'rejected', 'planned')),
    rejection_reason  TEXT,
    created_at        TEXT    NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX content_ideas_brief_id ON content_ideas (brief_id);
CREATE INDEX content_ideas_voice_profile_id ON content_ideas (voice_profile_id);

-- States: scheduled -> writing -> drafted -> published; any but published -> cancelled.
-- RESTRICT: an idea cannot be deleted once it is on the calendar.
CREATE TABLE content_plan (
    id             INTEGER PRIMARY KEY,
    idea_id        INTEGER NOT NULL REFERENCES content_ideas (id) ON DELETE RESTRICT,
    channel        TEXT    NOT NULL CHECK (channel IN ('blog', 'newsletter', 'linkedin', 'x')),
    scheduled_for  TEXT    NOT NULL,  -- YYYY-MM-DD
    status         TEXT    NOT NULL DEFAULT 'scheduled'
                   CHECK (status IN ('scheduled', 'writing', 'drafted', 'published', 'cancelled')),
    created_at     TEXT    NOT NULL DEFAULT (datetime('now')),
    UNIQUE (idea_id, channel)
);
CREATE INDEX content_plan_idea_id ON content_plan (idea_id);

-- States: draft -> in_review -> approved | revise | rejected; revise -> draft (new version).
-- CASCADE: drafts are the working papers of a plan slot. Deleting the slot takes them,
-- unless one was published: published -> drafts is RESTRICT and then blocks the delete.
CREATE TABLE drafts (
    id          INTEGER PRIMARY KEY,
    plan_id     INTEGER NOT NULL REFERENCES content_plan (id) ON DELETE CASCADE,
    version     INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1),
    title       TEXT    NOT NULL CHECK (length(trim(title)) > 0),
    body        TEXT    NOT NULL CHECK (length(trim(body)) > 0),
    word_count  INTEGER CHECK (word_count IS NULL OR word_count >= 0),
    status      TEXT    NOT NULL DEFAULT 'draft'
                CHECK (status IN ('draft', 'in_review', 'revise', 'approved', 'rejected')),
    created_at  TEXT    NOT NULL DEFAULT (datetime('now')),
    UNIQUE (plan_id, version)
);
CREATE INDEX drafts_plan_id ON drafts (plan_id);

-- Verdicts: pass | revise | reject, with a 0..10 score.
-- CASCADE: a critique is about one draft and means nothing without it.
CREATE TABLE critique_results (
    id          INTEGER PRIMARY KEY,
    draft_id    INTEGER NOT NULL REFERENCES drafts (id) ON DELETE CASCADE,
    critic      TEXT    NOT NULL DEFAULT 'agent' CHECK (length(trim(critic)) > 0),
    score       INTEGER NOT NULL CHECK (score BETWEEN 0 AND 10),
    verdict     TEXT    NOT NULL CHECK (verdict IN ('pass', 'revise', 'reject')),
    notes       TEXT,
    created_at  TEXT    NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX critique_results_draft_id ON critique_results (draft_id);

-- RESTRICT: what went live is history; its draft cannot be deleted.
CREATE TABLE published (
    id            INTEGER PRIMARY KEY,
    draft_id      INTEGER NOT NULL REFERENCES drafts (id) ON DELETE RESTRICT,
    channel       TEXT    NOT NULL CHECK (channel IN ('blog', 'newsletter', 'linkedin', 'x')),
    url           TEXT    NOT NULL UNIQUE CHECK (url LIKE 'https://%'),
    published_at  TEXT    NOT NULL DEFAULT (datetime('now')),
    created_at    TEXT    NOT NULL DEFAULT (datetime('now')),
    UNIQUE (draft_id, channel)
);
CREATE INDEX published_draft_id ON published (draft_id);

-- The agent's trail. story_id / ref_table / ref_id are plain text and integers, not foreign
-- keys, so that a log line outlives whatever it mentions.
CREATE TABLE agent_log (
    id          INTEGER PRIMARY KEY,
    story_id    TEXT,     -- PRD story id, e.g. 'US-003'
    iteration   INTEGER   CHECK (iteration IS NULL OR iteration >= 1),
    level       TEXT      NOT NULL DEFAULT 'info'
                CHECK (level IN ('debug', 'info', 'warning', 'error')),
    message     TEXT      NOT NULL CHECK (length(trim(message)) > 0),
    ref_table   TEXT,
    ref_id      INTEGER,
    created_at  TEXT      NOT NULL DEFAULT (datetime('now'))
);
CREATE INDEX agent_log_story_id ON agent_log (story_id);

-- 009_default_families: kv, timers and ephemeral queues are on for every
-- plan, existing and future. streams and traces stay per plan. A missing key
-- still means "off".

ALTER TABLE queen_proxy.plans
    ALTER COLUMN features SET DEFAULT '{"kv": true, "timers": true, "ephemeral": true}'::jsonb;

UPDATE queen_proxy.plans
   SET features = features || '{"kv": true, "timers": true, "ephemeral": true}'::jsonb
 WHERE NOT features @> '{"kv": true, "timers": true, "ephemeral": true}'::jsonb;

package migrations

import (
	"testing"
	"time"
)

func TestRecordOperation(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cluster := newCluster(t, pool, tenant, newCell(t, pool))
	user, _ := newUser(t, pool, tenant)
	l := listen(t, pool)

	id := scalar[string](t, pool, "SELECT queen_proxy.record_operation($1, NULL, 'user', $2, 'console_login', 'tgt', NULL)::text", tenant, user)
	l.expect(t) // no cluster, no notify
	var meta string
	var at time.Time
	if err := pool.QueryRow(ctxT(t), "SELECT meta::text, at FROM queen_proxy.operations WHERE id = $1", id).Scan(&meta, &at); err != nil {
		t.Fatal(err)
	}
	if meta != "{}" || time.Since(at) > time.Minute {
		t.Fatalf("operation meta %s at %v", meta, at)
	}
	o := oneOp(t, pool, tenant, "console_login")
	if o.Actor != "user" || str(o.ActorID) != user || str(o.Target) != "tgt" || o.ClusterID != nil {
		t.Fatalf("audit row = %+v", o)
	}

	exec(t, pool, `SELECT queen_proxy.record_operation($1, $2, 'api_key', NULL, 'console_key_created', NULL, '{"k": 1}')`, tenant, cluster)
	l.expect(t, cluster)
	if o := oneOp(t, pool, tenant, "console_key_created"); str(o.ClusterID) != cluster || o.Meta["k"] != float64(1) {
		t.Fatalf("audit row = %+v", o)
	}

	call := "SELECT queen_proxy.record_operation($1, NULL, $2, NULL, $3, NULL, NULL)"
	wantPgErr(t, callErr(t, pool, call, nil, "system", "x"), "22023", "record_operation: tenant")
	wantPgErr(t, callErr(t, pool, call, tenant, "robot", "x"), "22023", "record_operation: actor")
	wantPgErr(t, callErr(t, pool, call, tenant, nil, "x"), "22023", "record_operation: actor")
	wantPgErr(t, callErr(t, pool, call, tenant, "system", "  "), "22023", "record_operation: action")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.record_operation(gen_random_uuid(), NULL, 'system', NULL, 'x', NULL, NULL)"), "23503")
	l.expect(t)
}

func TestRevokeSession(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, _ := newUser(t, pool, tenant)
	jti := randHex(16)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.revoke_session($1, $2, p_actor_id => $3)", "  "+jti+" ", exp, user)
	exec(t, pool, "SELECT queen_proxy.revoke_session($1, $2, 'user', $3)", jti, exp.Add(time.Hour), user) // double logout
	// Every gateway must drop its cached deny-list answers: the nil uuid.
	l.expect(t, "00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000")
	if got := scalar[time.Time](t, pool, "SELECT expires_at FROM queen_proxy.revoked_tokens WHERE jti = $1", jti); !got.Equal(exp) {
		t.Fatalf("expires_at = %v, want %v (first revocation wins)", got, exp)
	}
	rows := ops(t, pool, tenant, "session_revoked")
	if len(rows) != 2 || rows[0].Actor != "user" || str(rows[0].ActorID) != user || str(rows[0].Target) != jti ||
		rows[0].ClusterID != nil || rows[0].Meta["expires_at"] == nil {
		t.Fatalf("audit rows = %+v", rows)
	}

	call := "SELECT queen_proxy.revoke_session($1, $2, 'user', $3)"
	wantPgErr(t, callErr(t, pool, call, " ", exp, user), "22023", "revoke_session: jti")
	wantPgErr(t, callErr(t, pool, call, "j", nil, user), "22023", "revoke_session: expires_at")
	wantPgErr(t, callErr(t, pool, call, "j", exp, nil), "P0002", "revoke_session: actor_id")
	wantPgErr(t, callErr(t, pool, call, "j", exp, "00000000-0000-0000-0000-000000000000"), "P0002", "revoke_session: actor_id")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.revoke_session('j', now(), 'robot', $1)", user), "22023", "record_operation: actor")
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.revoked_tokens WHERE jti = 'j'"); n != 0 {
		t.Fatal("a failed revoke_session left a deny-list row")
	}
}

func TestSweepRevokedTokens(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, _ := newUser(t, pool, tenant)
	scalar[int](t, pool, "SELECT queen_proxy.sweep_revoked_tokens()")
	before := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.operations")
	live := randHex(8)
	exec(t, pool, "SELECT queen_proxy.revoke_session($1, now() - interval '1 second', 'user', $2)", randHex(8), user)
	exec(t, pool, "SELECT queen_proxy.revoke_session($1, now() - interval '1 day', 'user', $2)", randHex(8), user)
	exec(t, pool, "SELECT queen_proxy.revoke_session($1, now() + interval '1 day', 'user', $2)", live, user)
	l := listen(t, pool)

	if n := scalar[int](t, pool, "SELECT queen_proxy.sweep_revoked_tokens()"); n != 2 {
		t.Fatalf("swept %d tokens, want 2", n)
	}
	l.expect(t)
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.revoked_tokens WHERE jti = $1", live); n != 1 {
		t.Fatal("an unexpired token was swept")
	}
	if n := scalar[int](t, pool, "SELECT queen_proxy.sweep_revoked_tokens()"); n != 0 {
		t.Fatalf("second sweep removed %d", n)
	}
	if after := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.operations"); after != before+3 {
		t.Fatalf("operations %d -> %d: the sweep must not audit", before, after)
	}
}

func TestEmitOutbox(t *testing.T) {
	pool := db(t)
	before := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.operations")
	l := listen(t, pool)
	id := scalar[string](t, pool, `SELECT queen_proxy.emit_outbox('  cluster_monthly_quota_warning ', '{"msgs": 80}')::text`)
	empty := scalar[string](t, pool, "SELECT queen_proxy.emit_outbox('ping', NULL)::text")
	l.expect(t)
	var kind, payload string
	var pending bool
	if err := pool.QueryRow(ctxT(t), "SELECT kind, payload::text, consumed_at IS NULL FROM queen_proxy.outbox WHERE id = $1", id).Scan(&kind, &payload, &pending); err != nil {
		t.Fatal(err)
	}
	if kind != "cluster_monthly_quota_warning" || payload != `{"msgs": 80}` || !pending {
		t.Fatalf("outbox row = %q %s %v", kind, payload, pending)
	}
	if p := scalar[string](t, pool, "SELECT payload::text FROM queen_proxy.outbox WHERE id = $1", empty); p != "{}" {
		t.Fatalf("NULL payload stored as %s", p)
	}
	if after := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.operations"); after != before {
		t.Fatal("emit_outbox wrote an audit row")
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.emit_outbox(' ', '{}')"), "22023", "emit_outbox: kind")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.emit_outbox(NULL, '{}')"), "22023", "emit_outbox: kind")
}

package controlplane

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TestClusterStatus: suspend, push-block and resume go through
// set_cluster_status (audited, announced); a deleting cluster is left alone
// unless forced; a bad status or cluster is refused before the database.
func TestClusterStatus(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	l := listen(t, url)

	for _, status := range []string{ClusterSuspended, ClusterPushBlocked, ClusterActive} {
		c := must[Cluster](t)(SetClusterStatus(ctx, pool, "ACME-prod", status, false))
		if c.Status != status || c.ID != w.cluster.ID {
			t.Fatalf("after %s: %+v", status, c)
		}
		if p := l.next(); p != w.cluster.ID {
			t.Fatalf("%s announced %q, want the cluster", status, p)
		}
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations
		WHERE action = 'cluster_status_changed' AND cluster_id = $1::uuid`, w.cluster.ID); n != 3 {
		t.Fatalf("%d audit rows, want 3", n)
	}

	_, err := SetClusterStatus(ctx, pool, "acme-prod", ClusterDeleting, false)
	wantErr(t, err, Invalid, `invalid cluster status "deleting": use active, push_blocked or suspended`)
	_, err = SetClusterStatus(ctx, pool, "nope", ClusterSuspended, false)
	wantErr(t, err, NotFound, `unknown cluster "nope"`)

	must[ClusterDeletionPlan](t)(BeginClusterDeletion(ctx, pool, "acme-prod"))
	_, err = SetClusterStatus(ctx, pool, "acme-prod", ClusterActive, false)
	wantErr(t, err, WrongState,
		`cluster "acme-prod" is being deleted (status deleting); finish the deletion, or force the change if it has not been purged yet`)
	if c := must[Cluster](t)(SetClusterStatus(ctx, pool, "acme-prod", ClusterActive, true)); c.Status != ClusterActive {
		t.Fatalf("forced resume: %+v", c)
	}
}

// TestClusterDeletionInThreeSteps: delete refuses a cluster that is not
// deleting; step 1 stops it and names its purge; step 3 removes it and
// what it owns, revokes its keys, leaves an audit row and an outbox event,
// and tells the gateways; the tenant and its other clusters stay.
func TestClusterDeletionInThreeSteps(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[Cell](t)(UpdateCell(ctx, pool, "eu1-a", CellChange{Tenancy: ptrTo("scoped"), Grants: ptrTo("none")}))
	other := must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "acme", Slug: "acme-dev", Plan: "dev", Cell: "eu1-a"}))
	must[IssuedKey](t)(CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: "app", Scopes: Scopes}))

	_, err := DeleteCluster(ctx, pool, "acme-prod", false, nil)
	wantErr(t, err, WrongState, `cluster "acme-prod" is active, not deleting: stop its traffic and purge it first`)

	l := listen(t, url)
	plan := must[ClusterDeletionPlan](t)(BeginClusterDeletion(ctx, pool, "acme-prod"))
	if plan.AlreadyDeleting || plan.Cluster.Status != ClusterDeleting || plan.Purge.BrokerTenantUUID != w.cluster.BrokerTenantUUID ||
		plan.Purge.CellSlug != "eu1-a" || plan.Purge.PurgeSQL() != "SELECT queen.delete_tenant_data_v1('"+w.cluster.BrokerTenantUUID+"');" {
		t.Fatalf("plan %+v", plan)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("step 1 announced %q", p)
	}
	if again := must[ClusterDeletionPlan](t)(BeginClusterDeletion(ctx, pool, "acme-prod")); !again.AlreadyDeleting {
		t.Fatalf("step 1 again: %+v", again)
	}

	d := must[ClusterDeletion](t)(DeleteCluster(ctx, pool, "acme-prod", false, nil))
	if !d.Deleted || d.ClusterID != w.cluster.ID || d.StatusWas != ClusterDeleting || d.Forced ||
		d.Counts["api_keys"] != 1 || d.Counts["api_keys_revoked"] != 1 || d.Released != nil {
		t.Fatalf("deletion %+v", d)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("step 3 announced %q", p)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.clusters WHERE id = $1::uuid`, w.cluster.ID); n != 0 {
		t.Fatal("the cluster is still there")
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.api_keys k
		WHERE NOT EXISTS (SELECT 1 FROM queen_proxy.clusters c WHERE c.id = k.cluster_id)`); n != 0 {
		t.Fatal("keys outlived their cluster")
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action = 'cluster_deleted'
		AND target = $1 AND tenant_id = $2::uuid AND meta->>'slug' = 'acme-prod'`, w.cluster.ID, w.tenant.ID); n != 1 {
		t.Fatalf("%d cluster_deleted audit rows", n)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.outbox WHERE kind = 'cluster_deleted'
		AND payload->>'cluster_id' = $1`, w.cluster.ID); n != 1 {
		t.Fatalf("%d cluster_deleted outbox events", n)
	}
	if cs := must[[]Cluster](t)(ListClusters(ctx, pool, ClusterFilter{Tenant: "acme"})); len(cs) != 1 || cs[0].ID != other.ID {
		t.Fatalf("the tenant's clusters after the deletion: %+v", cs)
	}
	_, err = DeleteCluster(ctx, pool, "acme-prod", false, nil)
	wantErr(t, err, NotFound, `unknown cluster "acme-prod"`)

	// --force deletes an active cluster at once.
	f := must[ClusterDeletion](t)(DeleteCluster(ctx, pool, "acme-dev", true, nil))
	if !f.Deleted || !f.Forced || f.StatusWas != ClusterActive {
		t.Fatalf("forced deletion %+v", f)
	}
}

// TestDeleteClusterReleasesTheKeeper: deleting the keeper of a cell not
// known to scope while another cluster stays asks the Releaser; its refusal
// keeps the cluster, and without one the database refuses.
func TestDeleteClusterReleasesTheKeeper(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	must[Tenant](t)(CreateTenant(ctx, pool, "globex", "Globex"))
	must[Cluster](t)(CreateCluster(ctx, pool, NewCluster{Tenant: "globex", Slug: "globex-prod", Plan: "pro", Cell: "eu1-a"}))

	_, err := DeleteCluster(ctx, pool, "acme-prod", true, nil)
	if KindOf(err) != WrongState || !strings.Contains(err.Error(), "is the keeper of cell") {
		t.Fatalf("deleting the keeper without a releaser: %v", err)
	}
	r := &recordingReleaser{refuse: errorf(WrongState, "has queues")}
	_, err = DeleteCluster(ctx, pool, "acme-prod", true, r.release)
	wantErr(t, err, WrongState, "has queues")
	if len(r.asked) != 1 || r.asked[0].ClusterID != w.cluster.ID || r.asked[0].Staying != 1 {
		t.Fatalf("releaser asked about %+v", r.asked)
	}
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "acme-prod" {
		t.Fatalf("a refused release deleted the keeper: %+v", c)
	}
	r = &recordingReleaser{}
	d := must[ClusterDeletion](t)(DeleteCluster(ctx, pool, "acme-prod", true, r.release))
	if d.Released == nil || d.Released.ClusterID != w.cluster.ID {
		t.Fatalf("deletion %+v", d)
	}
	if c := must[Cell](t)(GetCell(ctx, pool, "eu1-a")); c.KeeperSlug != "globex-prod" {
		t.Fatalf("keeper after the deletion: %q", c.KeeperSlug)
	}
}

// TestRotateKey: the new key has the old one's cluster, name and scopes;
// the old one stays live until now plus the overlap (not later than its own
// expiry), or is revoked at once with no overlap; a dead key is refused.
func TestRotateKey(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	old := must[IssuedKey](t)(CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: "app", Scopes: []string{"produce", "read"}}))
	l := listen(t, url)

	before := time.Now()
	rot := must[Rotation](t)(RotateKey(ctx, pool, strings.ToUpper(old.ID), 2*time.Hour, "live", nil))
	after := time.Now()
	if rot.New.ID == old.ID || !keyShape.MatchString(rot.New.Key) || rot.New.Name != "app" || rot.New.ClusterID != w.cluster.ID ||
		strings.Join(rot.New.Scopes, ",") != "produce,read" || rot.New.Status != "live" || rot.New.ExpiresAt != nil {
		t.Fatalf("new key %+v", rot.New)
	}
	if h := scalar[string](t, pool, `SELECT key_hash FROM queen_proxy.api_keys WHERE id = $1::uuid`, rot.New.ID); h != HashKey(rot.New.Key) {
		t.Fatal("the new key's stored hash is not its sha256")
	}
	if rot.Old.ID != old.ID || rot.Old.Status != "live" || rot.OldValidUntil == nil ||
		rot.OldValidUntil.Before(before.Add(2*time.Hour-time.Second)) || rot.OldValidUntil.After(after.Add(2*time.Hour+time.Second)) {
		t.Fatalf("old key %+v, valid until %v", rot.Old, rot.OldValidUntil)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("rotation announced %q", p)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations
		WHERE (action = 'api_key_issued' AND target = $1) OR (action = 'api_key_expiry_set' AND target = $2)`, rot.New.ID, old.ID); n != 2 {
		t.Fatalf("%d audit rows, want the issue and the expiry", n)
	}

	// Rotating again with a longer overlap never extends the old key.
	again := must[Rotation](t)(RotateKey(ctx, pool, old.ID, 48*time.Hour, "live", nil))
	if !again.OldValidUntil.Equal(*rot.OldValidUntil) {
		t.Fatalf("a longer overlap moved the expiry from %v to %v", rot.OldValidUntil, again.OldValidUntil)
	}

	// No overlap: revoked now. The new key's own expiry is set.
	exp := time.Now().Add(90 * 24 * time.Hour).UTC().Truncate(time.Microsecond)
	now := must[Rotation](t)(RotateKey(ctx, pool, rot.New.ID, 0, "test", &exp))
	if now.Old.Status != "revoked" || now.OldValidUntil != nil || !strings.HasPrefix(now.New.Key, "qk_test_") ||
		now.New.ExpiresAt == nil || !now.New.ExpiresAt.Equal(exp) {
		t.Fatalf("rotation without overlap %+v", now)
	}
	_, err := RotateKey(ctx, pool, rot.New.ID, time.Hour, "live", nil)
	wantErr(t, err, NotFound, `unknown or revoked key "`+rot.New.ID+`"`)

	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.api_keys SET expires_at = now() - interval '1 second' WHERE id = $1::uuid`, old.ID); err != nil {
		t.Fatal(err)
	}
	_, err = RotateKey(ctx, pool, old.ID, time.Hour, "live", nil)
	wantErr(t, err, WrongState, `key "`+old.ID+`" has expired: there is nothing to overlap; create a new key with "key create"`)
	_, err = RotateKey(ctx, pool, "app", time.Hour, "live", nil)
	wantErr(t, err, Invalid, `invalid key id "app": want the id that key list shows`)
	_, err = RotateKey(ctx, pool, old.ID, -time.Hour, "live", nil)
	wantErr(t, err, Invalid, "invalid overlap -1h0m0s: it cannot be negative (0 revokes the old key at once)")
}

func TestParseOverlap(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "0s": 0, "30m": 30 * time.Minute, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour} {
		if got, err := ParseOverlap(in); err != nil || got != want {
			t.Errorf("ParseOverlap(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	_, err := ParseOverlap("soon")
	wantErr(t, err, Invalid, `invalid overlap "soon": use a duration such as 30m, 24h or 7d, or 0 to revoke the old key at once`)
}

// TestSetPassword: the stored hash is bcrypt of the password (the plaintext
// never reaches the database), audited; clearing removes it; bad input is
// refused; set_user_password takes only a hash it knows.
func TestSetPassword(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	u := must[User](t)(CreateUser(ctx, pool, NewUser{Tenant: "acme", Email: "ann@acme.test"}))
	if u.HasPassword {
		t.Fatal("a user created without a password has one")
	}
	pw := must[string](t)(GeneratePassword())
	if len(pw) != 24 {
		t.Fatalf("generated password %q", pw)
	}
	u = must[User](t)(SetPassword(ctx, pool, " ANN@acme.test ", pw))
	if !u.HasPassword {
		t.Fatal("no password after set-password")
	}
	hash := scalar[string](t, pool, `SELECT password_hash FROM queen_proxy.users WHERE id = $1::uuid`, u.ID)
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)) != nil || strings.Contains(hash, pw) {
		t.Fatalf("stored hash %q is not bcrypt of the password", hash)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations WHERE action = 'user_password_set'
		AND target = $1 AND tenant_id = $2::uuid AND meta->>'cleared' = 'false'`, u.ID, w.tenant.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	if u = must[User](t)(ClearPassword(ctx, pool, "ann@acme.test")); u.HasPassword {
		t.Fatal("still a password after clearing it")
	}

	_, err := SetPassword(ctx, pool, "ann@acme.test", "short")
	wantErr(t, err, Invalid, "password must be 12 to 128 characters long")
	_, err = SetPassword(ctx, pool, "ann@acme.test", strings.Repeat("é", 40))
	wantErr(t, err, Invalid, "password is longer than 72 bytes, more than bcrypt reads")
	_, err = SetPassword(ctx, pool, "bob@acme.test", pw)
	wantErr(t, err, NotFound, `unknown user "bob@acme.test"`)
	_, err = pool.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, 'correct horse battery staple')`, u.ID)
	wantErr(t, dbError("set password", err), Invalid, "the hash is neither bcrypt nor argon2id")
}

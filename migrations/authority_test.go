package migrations

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const nilUUID = "00000000-0000-0000-0000-000000000000"

// audit writes a human's audit row, as the console and operator surfaces
// do inside the transaction that acts.
const auditCall = `SELECT queen_proxy.record_operation($1::uuid, $2::uuid, 'user', $3::uuid, $4, 'target', NULL)`

// wantAuthorityRefusal asserts err is the authority trigger's refusal.
func wantAuthorityRefusal(t *testing.T, err error, parts ...string) {
	t.Helper()
	wantPgErr(t, err, "42501", append([]string{"check_user_authority:"}, parts...)...)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.ConstraintName != "operations_user_authority" {
		t.Errorf("constraint name %q, want operations_user_authority", pgErr.ConstraintName)
	}
}

func TestOperatorBitChangeNotifiesEveryGateway(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, email := newUser(t, pool, tenant)
	l := listen(t, pool)

	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", email)
	l.expect(t, nilUUID)
	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", email) // unchanged: audited, nothing to drop
	l.expect(t)
	exec(t, pool, "SELECT queen_proxy.set_operator($1, false)", email)
	l.expect(t, nilUUID)
	// Not only through set_operator: any change of the bit.
	exec(t, pool, "UPDATE queen_proxy.users SET is_operator = true WHERE id = $1", user)
	l.expect(t, nilUUID)
	exec(t, pool, "UPDATE queen_proxy.users SET name = 'Renamed' WHERE id = $1", user)
	l.expect(t)
	// A deleted operator is no operator any more.
	exec(t, pool, "DELETE FROM queen_proxy.users WHERE id = $1", user)
	l.expect(t, nilUUID)
	plain, _ := newUser(t, pool, tenant)
	l.take(t)
	exec(t, pool, "DELETE FROM queen_proxy.users WHERE id = $1", plain)
	l.expect(t)
}

// operatorFixture is an operator of a tenant of its own and a cluster of
// another tenant.
type operatorFixture struct {
	opTenant, op, opEmail string
	tenant, cluster       string
}

func newOperatorFixture(t *testing.T, pool *pgxpool.Pool) operatorFixture {
	t.Helper()
	var f operatorFixture
	f.opTenant, _ = newTenant(t, pool)
	f.op, f.opEmail = newUser(t, pool, f.opTenant)
	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", f.opEmail)
	f.tenant, _ = newTenant(t, pool)
	f.cluster = newCluster(t, pool, f.tenant, newCell(t, pool))
	return f
}

// mintAsOperator issues a key on the cluster and audits it as the
// operator's act, in one transaction, as the fleet's key action does.
func mintAsOperator(t *testing.T, pool *pgxpool.Pool, f operatorFixture, name string) error {
	t.Helper()
	ctx := ctxT(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, ARRAY['admin'])`, f.cluster, name, hashOf(f.cluster+"/"+name)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, auditCall, f.tenant, f.cluster, f.op, "operator_api_key_issued"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func keysNamed(t *testing.T, pool *pgxpool.Pool, cluster, name string) int {
	t.Helper()
	return scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.api_keys WHERE cluster_id = $1 AND name = $2", cluster, name)
}

func TestOperatorActsNeedTheBitWhenTheyCommit(t *testing.T) {
	pool := db(t)
	f := newOperatorFixture(t, pool)

	if err := mintAsOperator(t, pool, f, "while-operator"); err != nil {
		t.Fatalf("an operator's act: %v", err)
	}
	exec(t, pool, "SELECT queen_proxy.set_operator($1, false)", f.opEmail)
	err := mintAsOperator(t, pool, f, "after-revocation")
	wantAuthorityRefusal(t, err, "operator_api_key_issued", "operator bit", f.op)
	if n := keysNamed(t, pool, f.cluster, "after-revocation"); n != 0 {
		t.Fatalf("%d keys minted by a revoked operator exist, want 0", n)
	}
	if n := keysNamed(t, pool, f.cluster, "while-operator"); n != 1 {
		t.Fatalf("%d keys minted while an operator, want 1", n)
	}
	// Every operator_* act, with or without a cluster; an unknown actor
	// is no operator either.
	for _, action := range []string{"operator_cluster_suspended", "operator_plan_changed", "operator_role_granted"} {
		wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, f.op, action), action)
	}
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.opTenant, nil, f.op, "operator_user_updated"), "operator_user_updated")
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, nil, "operator_cluster_resumed"), "NULL")
	// Rows of the control plane and the system are not a human's acts.
	exec(t, pool, `SELECT queen_proxy.record_operation($1, $2, 'control_plane', NULL, 'operator_cluster_suspended', NULL, NULL)`, f.tenant, f.cluster)
	// Granted again, it acts again.
	exec(t, pool, "SELECT queen_proxy.set_operator($1, true)", f.opEmail)
	if err := mintAsOperator(t, pool, f, "granted-again"); err != nil {
		t.Fatalf("an operator's act after the grant: %v", err)
	}
}

// TestRevocationAndActSerialize checks both orders of an operator's act
// and the revocation of the bit racing it: the act either commits before
// the revocation (which waits for it) or is refused.
func TestRevocationAndActSerialize(t *testing.T) {
	pool := db(t)
	ctx := ctxT(t)

	t.Run("act first: the revocation waits for it", func(t *testing.T) {
		f := newOperatorFixture(t, pool)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, auditCall, f.tenant, f.cluster, f.op, "operator_cluster_suspended"); err != nil {
			t.Fatal(err)
		}
		revoked := make(chan error, 1)
		go func() {
			_, err := pool.Exec(ctx, "SELECT queen_proxy.set_operator($1, false)", f.opEmail)
			revoked <- err
		}()
		waitBlocked(t, pool, "set_operator")
		select {
		case err := <-revoked:
			t.Fatalf("the revocation committed while an act checked against the bit was open: %v", err)
		default:
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-revoked; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("revocation first: the act is refused", func(t *testing.T) {
		f := newOperatorFixture(t, pool)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SELECT queen_proxy.set_operator($1, false)", f.opEmail); err != nil {
			t.Fatal(err)
		}
		acted := make(chan error, 1)
		go func() { acted <- mintAsOperatorErr(ctx, pool, f, "raced") }()
		waitBlocked(t, pool, "record_operation")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantAuthorityRefusal(t, <-acted, "operator_api_key_issued")
		if n := keysNamed(t, pool, f.cluster, "raced"); n != 0 {
			t.Fatalf("%d keys minted by an operator whose revocation committed first, want 0", n)
		}
	})
}

// mintAsOperatorErr is mintAsOperator for another goroutine: every error
// is returned.
func mintAsOperatorErr(ctx context.Context, pool *pgxpool.Pool, f operatorFixture, name string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, ARRAY['admin'])`, f.cluster, name, hashOf(f.cluster+"/"+name)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, auditCall, f.tenant, f.cluster, f.op, "operator_api_key_issued"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// waitBlocked waits until a session running a statement containing what
// waits for a lock.
func waitBlocked(t *testing.T, pool *pgxpool.Pool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := scalar[int](t, pool, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, what)
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session running %s waited for a lock within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConsoleActsNeedAdminOrOperator(t *testing.T) {
	pool := db(t)
	f := newOperatorFixture(t, pool)
	admin, adminEmail := newUser(t, pool, f.tenant)
	viewer, viewerEmail := newUser(t, pool, f.tenant)
	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'admin')", f.cluster, adminEmail)
	exec(t, pool, "SELECT queen_proxy.grant_cluster_role($1, $2, 'viewer')", f.cluster, viewerEmail)

	exec(t, pool, auditCall, f.tenant, f.cluster, admin, "console_api_key_issued")
	exec(t, pool, auditCall, f.tenant, f.cluster, f.op, "console_api_key_issued") // an operator acting as admin
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, viewer, "console_api_key_issued"), "admin role")
	// Only an operator creates an account for a new address.
	exec(t, pool, auditCall, f.tenant, f.cluster, f.op, "console_user_invited")
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, admin, "console_user_invited"), "operator bit")
	// A human's rows on no cluster (a sign-in) need nothing.
	exec(t, pool, auditCall, f.tenant, nil, viewer, "console_login")

	// Withdrawn, the operator's standing on a cluster of another tenant
	// is gone with it.
	exec(t, pool, "SELECT queen_proxy.set_operator($1, false)", f.opEmail)
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, f.op, "console_api_key_issued"), "admin role")
	exec(t, pool, "SELECT queen_proxy.revoke_cluster_role($1, $2)", f.cluster, adminEmail)
	wantAuthorityRefusal(t, callErr(t, pool, auditCall, f.tenant, f.cluster, admin, "console_member_granted"), "admin role")
}

func TestUserOrigin(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	user, _ := newUser(t, pool, tenant)
	by, _ := newUser(t, pool, tenant)
	if got := scalar[string](t, pool, "SELECT created_from || ' ' || coalesce(created_by::text, '-') FROM queen_proxy.users WHERE id = $1", user); got != "control_plane -" {
		t.Fatalf("a user created through create_user: %q, want control_plane without a creator", got)
	}
	exec(t, pool, "SELECT queen_proxy.set_user_origin($1, 'operator', $2)", user, by)
	if got := scalar[string](t, pool, "SELECT created_from || ' ' || created_by::text FROM queen_proxy.users WHERE id = $1", user); got != "operator "+by {
		t.Fatalf("after set_user_origin: %q", got)
	}
	// The creator's deletion keeps the account and forgets who made it.
	exec(t, pool, "DELETE FROM queen_proxy.users WHERE id = $1", by)
	if got := scalar[string](t, pool, "SELECT created_from || ' ' || coalesce(created_by::text, '-') FROM queen_proxy.users WHERE id = $1", user); got != "operator -" {
		t.Fatalf("after the creator's deletion: %q", got)
	}
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_origin($1, 'invited', NULL)", user), "22023", "set_user_origin: origin")
	wantPgErr(t, callErr(t, pool, "SELECT queen_proxy.set_user_origin(gen_random_uuid(), 'console', NULL)"), "P0002", "set_user_origin: unknown user")
}

// TestUserOriginBackfill: accounts made before users.created_from existed
// are classified by the audit row that created them when 023 runs.
func TestUserOriginBackfill(t *testing.T) {
	pool := db(t)
	f := newOperatorFixture(t, pool)
	invited, _ := newUser(t, pool, f.tenant)
	made, _ := newUser(t, pool, f.tenant)
	signedUp, _ := newUser(t, pool, f.tenant)
	plain, _ := newUser(t, pool, f.tenant)
	for user, action := range map[string]string{invited: "console_user_invited", made: "operator_user_created"} {
		exec(t, pool, `SELECT queen_proxy.record_operation($1, $2, 'user', $3, $4, $5, NULL)`, f.tenant, f.cluster, f.op, action, user)
	}
	exec(t, pool, `SELECT queen_proxy.record_operation($1, NULL, 'user', $2::uuid, 'signup', $2::text, NULL)`, f.tenant, signedUp)

	sql, err := files.ReadFile("023_user_authority.sql")
	if err != nil {
		t.Fatal(err)
	}
	exec(t, pool, string(sql))
	for user, want := range map[string]string{invited: "console " + f.op, made: "operator " + f.op, signedUp: "signup -", plain: "control_plane -"} {
		if got := scalar[string](t, pool, `SELECT created_from || ' ' || coalesce(created_by::text, '-') FROM queen_proxy.users WHERE id = $1`, user); got != want {
			t.Errorf("user %s: %q, want %q", user, got, want)
		}
	}
}

package controlplane

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/pgtest"
)

func TestConnectWithoutURL(t *testing.T) {
	_, err := Connect(ctxT(t), "  ", 0)
	wantErr(t, err, Invalid, "no database URL")
}

func TestConnectInvalidURL(t *testing.T) {
	_, err := Connect(ctxT(t), "postgres://user:secret@127.0.0.1:99999/db", 0)
	wantErr(t, err, Invalid, "invalid database URL: invalid port")
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

func TestConnectUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nobody listens there now
	_, err = Connect(ctxT(t), fmt.Sprintf("postgres://queen:secret@127.0.0.1:%d/queen", port), 0)
	wantErr(t, err, Unavailable, fmt.Sprintf("cannot reach the database at 127.0.0.1:%d: connection refused", port))
}

func TestConnectTimesOut(t *testing.T) {
	// A listener that accepts but never speaks PostgreSQL.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = Connect(ctxT(t), fmt.Sprintf("postgres://queen@%s/queen?sslmode=disable", l.Addr()), 300*time.Millisecond)
	if KindOf(err) != Unavailable || !strings.HasPrefix(err.Error(), "cannot reach the database at "+l.Addr().String()+": ") {
		t.Fatalf("err = %v (%s), want unavailable", err, KindOf(err))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("connect took %v despite a 300ms connect timeout", d)
	}
}

func TestConnectAndUnmigratedDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool, err := Connect(ctxT(t), url, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if name := scalar[string](t, pool, "SELECT current_setting('application_name')"); name != ApplicationName {
		t.Fatalf("application_name %q", name)
	}
	_, err = ListTenants(ctxT(t), pool)
	if KindOf(err) != NotMigrated || !strings.Contains(err.Error(), "run `caddy queen migrate` first") {
		t.Fatalf("ListTenants on an empty database: %v (%s)", err, KindOf(err))
	}

	m, err := Migrate(ctxT(t), pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Applied) == 0 || strings.Join(m.Applied, ",") != strings.Join(m.Known, ",") {
		t.Fatalf("first Migrate applied %v of %v", m.Applied, m.Known)
	}
	m, err = Migrate(ctxT(t), pool)
	if err != nil || len(m.Applied) != 0 {
		t.Fatalf("second Migrate = %+v, %v; want nothing applied", m, err)
	}
	// Migrating creates the operators' tenant and nothing else.
	if ts, err := ListTenants(ctxT(t), pool); err != nil || len(ts) != 1 || ts[0].Slug != PlatformTenant || ts[0].Clusters != 0 {
		t.Fatalf("ListTenants after migrating = %v, %v", ts, err)
	}
}

func TestDatabaseErrorKinds(t *testing.T) {
	pool, _ := fresh(t)
	ctx := ctxT(t)
	cases := []struct {
		sql  string
		kind Kind
		msg  string
	}{
		{`SELECT queen_proxy.create_tenant('acme', '')`, Invalid, "name is required"},
		{`SELECT queen_proxy.assign_plan(gen_random_uuid(), 'nope')`, NotFound, "unknown plan nope"},
		{`SELECT queen_proxy.delete_tenant(queen_proxy.create_tenant('held', 'Held'))`, WrongState, ""},
		{`SELECT 1/0`, Invalid, "division by zero"},
		{`SELECT * FROM queen_proxy.nothing_here`, NotMigrated, ""},
		{`SELECT pg_terminate_backend(pg_backend_pid())`, Unavailable, ""},
		{`SELECT queen_proxy.record_operation(NULL, NULL, 'user', NULL, 'x', NULL, NULL)`, Invalid, "tenant id is required"},
	}
	for _, c := range cases {
		_, err := pool.Exec(ctx, c.sql)
		got := dbError("test", err)
		if KindOf(got) != c.kind || (c.msg != "" && got.Error() != c.msg) {
			t.Errorf("%s: %v (%s), want %s %q", c.sql, got, KindOf(got), c.kind, c.msg)
		}
	}
	// A unique violation names what is taken, with the stored value.
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.create_tenant('dup', 'Dup')`); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `SELECT queen_proxy.create_tenant(' DUP ', 'Dup')`)
	wantErr(t, dbError("test", err), Taken, `tenant slug "dup" is already taken`)
}

package tenancy

import "testing"

func TestLongPoll(t *testing.T) {
	cases := []struct {
		path, query string
		wait        bool
		timeout     int64
	}{
		{"/api/v1/pop/queue/orders", "wait=true&timeout=1000", true, 1000},
		{"/api/v1/pop/queue/orders", "batch=1&wait=true", true, 30000},
		{"/api/v1/pop/queue/orders/partition/p1", "timeout=5000&wait=true", true, 5000},
		{"/api/v1/pop/queue/orders", "wait=%74rue&timeout=20", true, 20},
		// The broker finds "wait=" as a substring, not as a decoded key.
		{"/api/v1/pop/queue/orders", "w%61it=true", false, 0},
		{"/api/v1/pop/queue/orders", "wait=1", true, 30000},
		{"/api/v1/pop/queue/orders", "await=true", true, 30000},
		{"/api/v1/pop/queue/orders", "x=wait=true", true, 30000},
		{"/api/v1/pop/queue/orders", "await=false&wait=true", false, 0},
		{"/api/v1/pop/queue/orders", "wait=false&wait=true", false, 0},
		{"/api/v1/pop/queue/orders", "wait=TRUE", false, 0},
		{"/api/v1/pop/queue/orders", "wait=&wait=true", false, 0},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=abc&timeout=5", true, 30000},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=1500ms", true, 1500},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=+2000", true, 2000},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=-5", true, 0},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=0", true, 0},
		{"/api/v1/pop/queue/orders", "wait=true&timeout=99999999999", true, 30000},
		{"/api/v1/pop/queue/orders", "", false, 0},
		// Unreadable with certainty: counted as a long poll (and refused
		// by the pipeline before it is forwarded).
		{"/api/v1/pop/queue/orders", "wait=%zz&wait=true", true, 30000},
		{"/api/v1/ephemeral/pop", "wait=true&timeout=100", true, 100},
		{"/api/v1/push", "wait=true", false, 0},
		{"/api/v1/fetch", "wait=true", false, 0},
	}
	for _, tc := range cases {
		wait, timeout := LongPoll(tc.path, tc.query)
		if wait != tc.wait || timeout != tc.timeout {
			t.Errorf("LongPoll(%q, %q) = %v, %d; want %v, %d", tc.path, tc.query, wait, timeout, tc.wait, tc.timeout)
		}
	}
}

func FuzzLongPoll(f *testing.F) {
	f.Add("/api/v1/pop/queue/q", "wait=true&timeout=1000")
	f.Add("/api/v1/pop/queue/q", "wait=%74rue&timeout=%31")
	f.Add("/api/v1/ephemeral/pop", "&&=&wait&timeout=99999999999999999999")
	f.Fuzz(func(t *testing.T, path, query string) {
		wait, timeout := LongPoll(path, query)
		if !wait && timeout != 0 {
			t.Fatalf("not a long poll but timeout %d", timeout)
		}
		if timeout < 0 {
			t.Fatalf("negative timeout %d", timeout)
		}
	})
}

func FuzzSlugFromHost(f *testing.F) {
	f.Add("acme-prod.eu1.example.com:8443")
	f.Add("[::1]:6711")
	f.Add("x..:")
	f.Fuzz(func(t *testing.T, host string) {
		slug := SlugFromHost(host)
		if slug != SlugFromHost(slug) && !ValidSlug(slug) {
			// A slug must be stable under re-resolution whenever it is a
			// name a cluster could have.
			return
		}
		if ValidSlug(slug) && SlugFromHost(slug+".eu1.example.com") != slug {
			t.Fatalf("slug %q does not round-trip", slug)
		}
	})
}

package uuidtext

import "testing"

func TestValid(t *testing.T) {
	cases := []struct {
		s            string
		valid, lower bool
	}{
		{"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", true, true},
		{"0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D", true, false},
		{"00000000-0000-0000-0000-000000000000", true, true},
		{"0a1b2c3d4e5f4a6b8c7d9e0f1a2b3c4d", false, false},
		{"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4", false, false},
		{"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4g", false, false},
		{"0a1b2c3d+4e5f-4a6b-8c7d-9e0f1a2b3c4d", false, false},
		{"", false, false},
	}
	for _, c := range cases {
		if Valid(c.s) != c.valid || ValidLower(c.s) != c.lower {
			t.Errorf("%q: Valid %v ValidLower %v, want %v %v", c.s, Valid(c.s), ValidLower(c.s), c.valid, c.lower)
		}
	}
}

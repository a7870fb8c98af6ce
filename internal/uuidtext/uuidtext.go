// Package uuidtext recognises UUIDs in their textual 8-4-4-4-12 form, the
// one PostgreSQL reads and prints, without parsing them.
package uuidtext

// Valid reports whether s is a hyphenated UUID, hex digits in either case.
func Valid(s string) bool { return valid(s, true) }

// ValidLower reports whether s is a hyphenated UUID in lowercase, the form
// PostgreSQL prints and queen_proxy stores.
func ValidLower(s string) bool { return valid(s, false) }

func valid(s string, upperOK bool) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || upperOK && 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

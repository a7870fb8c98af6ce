package tenancy

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// The Queen broker does not parse its query string into parameters. To read
// parameter key it searches the raw query (everything after the first "?")
// for the first occurrence of the substring "key=", wherever it stands, and
// takes the bytes from there up to the next "&" (or the end), URL-decoding
// them ("%XX" and "+"). So "wait=1", "await=true" and "x=wait=true" all read
// wait as set, while in "await=false&wait=true" the first "wait=" is the
// one inside "await=false". An empty value reads as absent. The gateway
// acts on some parameters (a long-poll takes a parked slot and a longer
// upstream deadline, an auto-acknowledging pop is a write), so it must read
// them with these same rules: BrokerQueryValue is that reading.
//
// One corner of the broker's decoder is not a rule but an accident of its
// C++ stream parsing: a "%" that is not followed by two hexadecimal digits
// ("%7", "%zz", "%+1", "% 1") decodes differently depending on the digits,
// signs and blanks that follow. Values like that are refused with
// ErrAmbiguousQuery instead of being guessed at.

// ErrAmbiguousQuery is wrapped by the errors of the broker-query readers: a
// parameter the gateway acts on has a value the broker could decode in
// more than one way, so the request is refused (400 bad_request).
var ErrAmbiguousQuery = errors.New("ambiguous query parameter")

// ambiguousQuery is an ErrAmbiguousQuery naming the parameter.
type ambiguousQuery struct{ key string }

func (e *ambiguousQuery) Error() string {
	return ErrAmbiguousQuery.Error() + ": the value of " + e.key + " has a % that is not followed by two hex digits"
}
func (e *ambiguousQuery) Unwrap() error { return ErrAmbiguousQuery }

// BrokerQueryValue returns the value the broker reads for key from
// rawQuery, and whether it reads one at all (found is false when "key=" does
// not occur or its value is empty, the broker's "use the default"). The
// value is decoded as the broker decodes it. An error wrapping
// ErrAmbiguousQuery means the value holds a malformed percent escape.
func BrokerQueryValue(rawQuery, key string) (value string, found bool, err error) {
	raw, ok := brokerRawValue(rawQuery, key)
	if !ok || raw == "" {
		return "", false, nil
	}
	if strings.IndexByte(raw, '%') < 0 && strings.IndexByte(raw, '+') < 0 {
		return raw, true, nil
	}
	v, ok := decodeBrokerValue(raw)
	if !ok {
		return "", false, &ambiguousQuery{key: key}
	}
	return v, v != "", nil
}

// brokerRawValue finds the first "key=" in q and returns the still-encoded
// bytes up to the next "&".
func brokerRawValue(q, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	for from := 0; from < len(q); {
		i := strings.Index(q[from:], key)
		if i < 0 {
			return "", false
		}
		end := from + i + len(key)
		if end < len(q) && q[end] == '=' {
			v := q[end+1:]
			if amp := strings.IndexByte(v, '&'); amp >= 0 {
				v = v[:amp]
			}
			return v, true
		}
		from += i + 1
	}
	return "", false
}

// decodeBrokerValue undoes "%XX" and "+" (a space). It reports false for a
// "%" without two hex digits after it.
func decodeBrokerValue(raw string) (string, bool) {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '%':
			v, ok := unhexPair(raw, i+1)
			if !ok {
				return "", false
			}
			b.WriteByte(v)
			i += 2
		case '+':
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// BrokerQueryBool is the broker's boolean reading of key: "true" and "1"
// are true, any other non-empty value is false, and an absent or empty one
// is def.
func BrokerQueryBool(rawQuery, key string, def bool) (bool, error) {
	v, found, err := BrokerQueryValue(rawQuery, key)
	if err != nil || !found {
		return def, err
	}
	return v == "true" || v == "1", nil
}

// BrokerQueryInt is the broker's integer reading of key (C++ std::stoi on
// the decoded value): leading white space is skipped, an optional sign and
// the decimal digits that follow are the number, anything after them is
// ignored ("30000ms" is 30000). No digits, or a number outside the 32-bit
// int range, is def, as is an absent or empty value.
func BrokerQueryInt(rawQuery, key string, def int) (int, error) {
	v, found, err := BrokerQueryValue(rawQuery, key)
	if err != nil || !found {
		return def, err
	}
	n, ok := stoi(v)
	if !ok {
		return def, nil
	}
	return n, nil
}

// stoi reads an int as std::stoi does in base 10 on a platform with a
// 32-bit int: false when std::stoi would throw.
func stoi(s string) (int, bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var n int64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int64(s[i]-'0')
		if n > 1<<31 { // already out of range either way; stop before overflow
			return 0, false
		}
		i++
	}
	if i == start {
		return 0, false
	}
	if neg {
		n = -n
	}
	if n < -1<<31 || n > 1<<31-1 {
		return 0, false
	}
	return int(n), true
}

// isCSpace is C's isspace in the "C" locale.
func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// QueryHoldsNUL reports whether the broker would decode U+0000 from the raw
// query: a raw 0x00 byte or the escape %00 in any parameter, which it
// decodes and passes on (a consumerGroup=a%00b reaches its SQL, where
// PostgreSQL refuses it). The gateway refuses such a query whatever the
// parameter, as it refuses U+0000 in bodies.
func QueryHoldsNUL(rawQuery string) bool {
	return strings.Contains(rawQuery, "%00") || strings.IndexByte(rawQuery, 0) >= 0
}

// MaxQueryNameChars is the longest consumerGroup the broker's schema holds
// (partition_consumers.consumer_group varchar(255)), in characters.
const MaxQueryNameChars = 255

// ConsumerGroupTooLong reports whether the consumerGroup the broker reads
// from rawQuery (BrokerQueryValue) is longer than MaxQueryNameChars
// characters. A value that cannot be decoded one way is left to the pop
// query reader, which refuses it.
func ConsumerGroupTooLong(rawQuery string) bool {
	if len(rawQuery) <= MaxQueryNameChars || !strings.Contains(rawQuery, "consumerGroup=") {
		return false
	}
	v, found, err := BrokerQueryValue(rawQuery, "consumerGroup")
	return err == nil && found && len(v) > MaxQueryNameChars && utf8.RuneCountInString(v) > MaxQueryNameChars
}

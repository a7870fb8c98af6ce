package fakebroker

import "strings"

// The broker reads a query parameter by searching the raw query string for
// the first occurrence of "key=" (anywhere: "await=true" sets wait) and
// URL-decoding the bytes up to the next "&"; an empty value means the
// default. A boolean is true for "true" or "1"; an integer is read as C++
// std::stoi reads it (blanks, a sign, digits, and whatever follows
// ignored; no digits or out of int range: the default). The pop routes
// read their parameters this way, so the fake parks exactly the pops the
// broker would, and a test can tell a gateway that reads them otherwise.

// brokerParam is the decoded value of key, "" when absent.
func brokerParam(rawQuery, key string) string {
	i := strings.Index(rawQuery, key+"=")
	if i < 0 {
		return ""
	}
	v := rawQuery[i+len(key)+1:]
	if amp := strings.IndexByte(v, '&'); amp >= 0 {
		v = v[:amp]
	}
	return brokerURLDecode(v)
}

// brokerURLDecode decodes "%XX" and "+". Like the broker, it keeps a "%"
// it cannot decode (one with fewer than two characters after it, or no hex
// digit next) as it is; a single hex digit followed by something else
// still counts, as the broker's stream parser reads it.
func brokerURLDecode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]):
			v := unhex(s[i+1])
			if isHex(s[i+2]) {
				v = v<<4 | unhex(s[i+2])
			}
			b.WriteByte(v)
			i += 2
		case c == '+':
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// brokerParamBool is the broker's boolean reading.
func brokerParamBool(rawQuery, key string, def bool) bool {
	v := brokerParam(rawQuery, key)
	if v == "" {
		return def
	}
	return v == "true" || v == "1"
}

// brokerParamInt is the broker's integer reading.
func brokerParamInt(rawQuery, key string, def int) int {
	v := strings.TrimLeft(brokerParam(rawQuery, key), " \t\n\v\f\r")
	if v == "" {
		return def
	}
	neg := v[0] == '-'
	if v[0] == '-' || v[0] == '+' {
		v = v[1:]
	}
	n, digits := int64(0), 0
	for ; digits < len(v) && v[digits] >= '0' && v[digits] <= '9'; digits++ {
		n = n*10 + int64(v[digits]-'0')
		if n > 1<<31 {
			return def
		}
	}
	if digits == 0 {
		return def
	}
	if neg {
		n = -n
	}
	if n > 1<<31-1 || n < -1<<31 {
		return def
	}
	return int(n)
}

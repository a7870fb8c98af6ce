package meter

import (
	"encoding/binary"
	"math/bits"

	"github.com/queengate/queengate/wire"
)

// The broker writes the elements of its answers' arrays in a few fixed
// shapes: the same members, in the same (sorted) order, compact, their
// strings plain. An element reader recognises an element of such a shape
// by its bytes (each member's name, quotes and colon compared at once, no
// name measured or told) and takes what the tally reads from it in one
// step; the first byte that differs from the shape, or an element cut by
// the end of a piece, leaves the element to the general reader, which
// reads it again from its start. So what the shapes read is what the
// general reader would: the fuzz targets of the tallies check it.

// elementReader reads an element object at p[i] whole when it knows its
// shape, and returns the index past it; it returns -1 having changed
// nothing when it does not know it.
// It may use s.inner to check a nested value.
type elementReader interface {
	element(s *answerScan, p []byte, i int) int
}

// maxShapeMembers bounds the members of a shape.
const maxShapeMembers = 10

// answerShape is the members of an element object, each written as its
// name in quotes and a colon, after '{' (the first) or ',' (the others).
type answerShape struct {
	heads  []shapeHead
	nested int // the member whose value may be any JSON value (-1: none; the others are strings or scalars)
}

// shapeHead is one member's head, as up to three little-endian words (the
// last one's unused bytes masked off) to compare eight bytes at a time.
type shapeHead struct {
	text  string
	words [3]uint64
	masks [3]uint64
}

// is reports whether p[i:] starts with the head; p holds at least
// len(h.text) bytes past i.
func (h *shapeHead) is(p []byte, i int) bool {
	if len(p)-i < 8*len(h.words) {
		return string(p[i:i+len(h.text)]) == h.text
	}
	q := p[i : i+24]
	return binary.LittleEndian.Uint64(q)&h.masks[0] == h.words[0] &&
		binary.LittleEndian.Uint64(q[8:])&h.masks[1] == h.words[1] &&
		binary.LittleEndian.Uint64(q[16:])&h.masks[2] == h.words[2]
}

// shapeOf is the shape of an object with members names, in that order;
// nested is the index of the member that may hold containers, or -1.
func shapeOf(nested int, names ...string) *answerShape {
	return shapeFrom("{", nested, names...)
}

// shapeFrom is shapeOf with the first member after first: "," for the
// last members of an object whose first ones were read already.
func shapeFrom(first string, nested int, names ...string) *answerShape {
	if len(names) > maxShapeMembers {
		panic("meter: a shape of too many members")
	}
	sh := &answerShape{nested: nested}
	for i, name := range names {
		lead := ","
		if i == 0 {
			lead = first
		}
		sh.heads = append(sh.heads, headOf(lead+`"`+name+`":`))
	}
	return sh
}

// headOf is the head text, to compare eight bytes at a time.
func headOf(text string) shapeHead {
	if len(text) > 24 {
		panic("meter: a shape's member name is too long")
	}
	h := shapeHead{text: text}
	for j := range len(text) {
		h.words[j/8] |= uint64(text[j]) << (8 * (j % 8))
		h.masks[j/8] |= 0xff << (8 * (j % 8))
	}
	return h
}

// shapeValue is where one member's value lies in the piece: first is '"'
// for a plain string (at and end its text, between the quotes), else the
// value's first byte (at and end the value).
type shapeValue struct {
	first   byte
	at, end int32
}

// shapeValues is what matchShape found, one value per member.
type shapeValues [maxShapeMembers]shapeValue

// noWatch hears nothing: the watcher of a value read on its own, which
// only checks it.
type noWatch struct{}

func (noWatch) open(int, byte)                {}
func (noWatch) close(int)                     {}
func (noWatch) key(int, []byte, bool) bool    { return false }
func (noWatch) value(int, byte, []byte, bool) {}

var noNames = &nameFilter{}

// matchShape reads the element object at p[i] as sh when it is written so,
// its values in vals (when not nil), and returns the index past its
// closing brace; -1 when it is not, or is cut by the end of p. depth is the
// object's own depth; s.inner checks a nested value, which it reads on its
// own. p is shorter than 2 GiB (a piece, or a body BillPop reads).
func (s *answerScan) matchShape(sh *answerShape, p []byte, i int, depth int, vals *shapeValues) int {
	for k := range sh.heads {
		head := &sh.heads[k]
		if len(p)-i <= len(head.text) || !head.is(p, i) {
			return -1
		}
		i += len(head.text)
		switch c := p[i]; c {
		case '"':
			text := i + 1
			end := text
			for end+8 <= len(p) {
				if m := wire.SpecialBytes(binary.LittleEndian.Uint64(p[end:])); m != 0 {
					end += bits.TrailingZeros64(m) >> 3
					goto measured
				}
				end += 8
			}
			end += plainLen(p[end:])
		measured:
			if end >= len(p) || p[end] != '"' {
				return -1
			}
			if vals != nil {
				vals[k] = shapeValue{'"', int32(text), int32(end)}
			}
			i = end + 1
		case '{', '[':
			if k != sh.nested {
				return -1
			}
			end := s.inner.readValue(p, i, depth)
			if end < 0 {
				return -1
			}
			if vals != nil {
				vals[k] = shapeValue{c, int32(i), int32(end)}
			}
			i = end
		default:
			end := scalarEnd(p, i)
			if end == 0 {
				return -1
			}
			if vals != nil {
				vals[k] = shapeValue{c, int32(i), int32(end)}
			}
			i = end
		}
	}
	if i >= len(p) || p[i] != '}' {
		return -1
	}
	return i + 1
}

// readValue checks the container at p[i], the value of a member of an
// object at depth, as the general reader would, on its own; it returns the
// index past it, or -1 when it is refused or cut by the end of p.
func (s *answerScan) readValue(p []byte, i int, depth int) int {
	if end := flatObjectEnd(p, i); end > 0 {
		return end
	}
	s.reset(noWatch{}, 0, noNames)
	s.maxDepth = s.maxDepth - depth
	s.stopAtEnd, s.stopped = true, -1
	s.write(p[i:])
	if s.failed || s.stopped < 0 {
		return -1
	}
	return i + s.stopped
}

// flatObjectEnd returns the index past the object at p[i] when it is
// compact and flat (plain names, each with a plain string or a scalar) and
// ends within p, else 0: the most common payload, checked without the
// general reader's state.
func flatObjectEnd(p []byte, i int) int {
	if p[i] != '{' || i+1 >= len(p) {
		return 0
	}
	i++
	if p[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(p) || p[i] != '"' {
			return 0
		}
		end := i + 1 + plainLen(p[i+1:])
		if end+2 >= len(p) || p[end] != '"' || p[end+1] != ':' {
			return 0
		}
		i = end + 2
		if p[i] == '"' {
			end = i + 1 + plainLen(p[i+1:])
			if end >= len(p) || p[end] != '"' {
				return 0
			}
			i = end + 1
		} else if i = scalarEnd(p, i); i == 0 {
			return 0
		}
		switch {
		case i >= len(p):
			return 0
		case p[i] == '}':
			return i + 1
		case p[i] != ',':
			return 0
		}
		i++
	}
}

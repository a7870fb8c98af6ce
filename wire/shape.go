package wire

import (
	"encoding/binary"
	"math/bits"
)

// The broker writes the elements of its answers' arrays in a few fixed
// shapes: the same members, in the same (sorted) order, compact, their
// strings plain. An element reader recognises an element of such a shape
// by its bytes (each member's name, quotes and colon compared at once, no
// name measured or told) and takes what its reader needs from it in one
// step; the first byte that differs from the shape, or an element cut by
// the end of a piece, leaves the element to the general reader, which
// reads it again from its start. So what the shapes read is what the
// general reader would: the fuzz targets of meter's tallies check it.

// ElementReader reads an element object at p[i] whole when it knows its
// shape, and returns the index past it; it returns -1 having changed
// nothing when it does not know it. It may have MatchShape check a nested
// value.
type ElementReader interface {
	Element(s *Stream, p []byte, i int) int
}

// MaxShapeMembers bounds the members of a shape.
const MaxShapeMembers = 10

// Shape is the members of an element object, each written as its
// name in quotes and a colon, after '{' (the first) or ',' (the others).
type Shape struct {
	heads  []Head
	nested int // the member whose value may be any JSON value (-1: none; the others are strings or scalars)
}

// Head is one member's head, as up to three little-endian words (the
// last one's unused bytes masked off) to compare eight bytes at a time.
type Head struct {
	text  string
	words [3]uint64
	masks [3]uint64
}

// Skip returns the index past the head when p[i:] starts with it and at
// least one byte follows it, else -1.
func (h *Head) Skip(p []byte, i int) int {
	if len(p)-i <= len(h.text) || !h.is(p, i) {
		return -1
	}
	return i + len(h.text)
}

// is reports whether p[i:] starts with the head; p holds at least
// len(h.text) bytes past i.
func (h *Head) is(p []byte, i int) bool {
	if len(p)-i < 8*len(h.words) {
		return string(p[i:i+len(h.text)]) == h.text
	}
	q := p[i : i+24]
	return binary.LittleEndian.Uint64(q)&h.masks[0] == h.words[0] &&
		binary.LittleEndian.Uint64(q[8:])&h.masks[1] == h.words[1] &&
		binary.LittleEndian.Uint64(q[16:])&h.masks[2] == h.words[2]
}

// ShapeOf is the shape of an object with members names, in that order;
// nested is the index of the member that may hold containers, or -1.
func ShapeOf(nested int, names ...string) *Shape {
	return ShapeFrom("{", nested, names...)
}

// ShapeFrom is ShapeOf with the first member after first: "," for the
// last members of an object whose first ones were read already.
func ShapeFrom(first string, nested int, names ...string) *Shape {
	if len(names) > MaxShapeMembers {
		panic("wire: a shape of too many members")
	}
	sh := &Shape{nested: nested}
	for i, name := range names {
		lead := ","
		if i == 0 {
			lead = first
		}
		sh.heads = append(sh.heads, HeadOf(lead+`"`+name+`":`))
	}
	return sh
}

// HeadOf is the head text, to compare eight bytes at a time.
func HeadOf(text string) Head {
	if len(text) > 24 {
		panic("wire: a shape's member name is too long")
	}
	h := Head{text: text}
	for j := range len(text) {
		h.words[j/8] |= uint64(text[j]) << (8 * (j % 8))
		h.masks[j/8] |= 0xff << (8 * (j % 8))
	}
	return h
}

// ShapeValue is where one member's value lies in the piece: First is '"'
// for a plain string (At and End its text, between the quotes), else the
// value's first byte (At and End the value).
type ShapeValue struct {
	First   byte
	At, End int32
}

// ShapeValues is what MatchShape found, one value per member.
type ShapeValues [MaxShapeMembers]ShapeValue

// MatchShape reads the element object at p[i] as sh when it is written so,
// its values in vals (when not nil), and returns the index past its
// closing brace; -1 when it is not, or is cut by the end of p. depth is the
// object's own depth; a nested value is checked by the grammar's core, on
// its own. p is shorter than 2 GiB (a piece, or a kept answer).
func (s *Stream) MatchShape(sh *Shape, p []byte, i int, depth int, vals *ShapeValues) int {
	i = s.MatchMembers(sh, p, i, depth, vals)
	if i < 0 || i >= len(p) || p[i] != '}' {
		return -1
	}
	return i + 1
}

// MatchMembers is MatchShape without the closing brace: it returns the
// index past the last member's value (-1 when p[i:] does not start so),
// for an object whose other members a caller reads itself.
func (s *Stream) MatchMembers(sh *Shape, p []byte, i int, depth int, vals *ShapeValues) int {
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
				if m := SpecialBytes(binary.LittleEndian.Uint64(p[end:])); m != 0 {
					end += bits.TrailingZeros64(m) >> 3
					goto measured
				}
				end += 8
			}
			end += PlainLen(p[end:])
		measured:
			if end >= len(p) || p[end] != '"' {
				return -1
			}
			if vals != nil {
				vals[k] = ShapeValue{'"', int32(text), int32(end)}
			}
			i = end + 1
		case '{', '[':
			if k != sh.nested {
				return -1
			}
			s.nest.begin(depth)
			end := s.nest.scan(p, i)
			if s.nest.state != rDone {
				return -1
			}
			if vals != nil {
				vals[k] = ShapeValue{c, int32(i), int32(end)}
			}
			i = end
		default:
			end := ScalarEnd(p, i)
			if end == 0 {
				return -1
			}
			if vals != nil {
				vals[k] = ShapeValue{c, int32(i), int32(end)}
			}
			i = end
		}
	}
	return i
}

// ElementsEnd reads the elements of an array from p[i], past its '[',
// each with element (an ElementReader's Element, or a MatchShape), and
// returns the index past the ']'; -1 when an element is not an object
// element reads whole, or the array does not end within p.
func ElementsEnd(p []byte, i int, element func(p []byte, i int) int) int {
	if i >= len(p) {
		return -1
	}
	if p[i] == ']' {
		return i + 1
	}
	for {
		if p[i] != '{' {
			return -1
		}
		if i = element(p, i); i < 0 || i+1 >= len(p) {
			return -1
		}
		if p[i] == ']' {
			return i + 1
		}
		if p[i] != ',' {
			return -1
		}
		i++
	}
}

// The items of one push answer are written alike: the same members, and
// strings of the same lengths (uuids, the queue's name), so the item
// before says where each long string of the next one ends. Such a string
// is read first at that length: it is taken when the byte at its
// predicted end is a quote and no byte before it is special (a quote, a
// backslash, a control or a non-ASCII byte), every word of it checked
// without a branch per word. That is exactly where the general reading
// ends it, its first special byte being that quote. Any other string is
// measured as MatchShape measures it, and gives the next item its length.

// ShapeLengths is, per member of a shape, the length of the string the
// last item read in it held there (0 until one did).
type ShapeLengths [MaxShapeMembers]int32

// MatchShapeGuessing is MatchShape for a shape of strings and scalars only
// (the push shapes: none nested), guessing the strings' lengths from lens
// and leaving there the lengths it found. It returns the index past the
// item's closing brace, or -1 (having read nothing: lens may then hold
// other guesses, which only costs the next item a measure).
func MatchShapeGuessing(sh *Shape, lens *ShapeLengths, p []byte, i int, vals *ShapeValues) int {
	for k := range sh.heads {
		head := &sh.heads[k]
		if len(p)-i <= len(head.text) || !head.is(p, i) {
			return -1
		}
		i += len(head.text)
		if p[i] != '"' {
			end := ScalarEnd(p, i)
			if end == 0 {
				return -1
			}
			vals[k] = ShapeValue{p[i], int32(i), int32(end)}
			i = end
			continue
		}
		text := i + 1
		end := text + int(lens[k])
		if !plainAsGuessed(p, text, end) {
			end = PlainEnd(p, text)
			if end >= len(p) || p[end] != '"' {
				return -1
			}
			lens[k] = int32(end - text)
		}
		vals[k] = ShapeValue{'"', int32(text), int32(end)}
		i = end + 1
	}
	if i >= len(p) || p[i] != '}' {
		return -1
	}
	return i + 1
}

// plainAsGuessed reports whether p[text:end] is plain string text of at
// least a word and p[end] a quote.
func plainAsGuessed(p []byte, text, end int) bool {
	if end-text < 8 || end >= len(p) || p[end] != '"' {
		return false
	}
	return PlainRun(p, text, end)
}

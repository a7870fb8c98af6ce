package meter

// listPlace is where a watcher of an answer stands that is an object
// holding a list of objects (a pop's messages, a transaction's results, a
// cycle's push results): the one rule, for every such watcher, of which
// member names and values are the answer's own and which are its list's
// elements'. Depths are wire.Stream's: 1 inside the answer, 2 inside the
// list, 3 inside one of its elements.
type listPlace struct {
	isObject bool // the answer is an object
	inList   bool // inside the list
	inItem   bool // inside one of its elements that is an object
}

// open takes a container opened at depth; listValue says it is the value
// of the list's member. It reports whether the container is an element of
// the list (p.inItem then says whether it is an object).
func (p *listPlace) open(depth int, kind byte, listValue bool) (element bool) {
	switch {
	case depth == 1:
		p.isObject = kind == '{'
	case listValue:
		p.inList = kind == '['
	case depth == 3 && p.inList:
		p.inItem = kind == '{'
		return true
	}
	return false
}

// close takes a container closed at depth and reports whether it was an
// element of the list that is an object.
func (p *listPlace) close(depth int) (itemEnds bool) {
	switch {
	case depth == 3 && p.inItem:
		p.inItem = false
		return true
	case depth == 2:
		p.inList = false
	}
	return false
}

// topMember reports whether a member name at depth is one of the answer's
// own, and itemMember whether it is one of an element's.
func (p *listPlace) topMember(depth int) bool  { return depth == 1 && p.isObject }
func (p *listPlace) itemMember(depth int) bool { return depth == 3 && p.inItem }

package eject

// nodeQueue is a queue of node states, linked through the states, so that
// one leaves it in constant time.
type nodeQueue struct {
	head, tail *nodeHealth
	len        int
}

func (q *nodeQueue) push(nh *nodeHealth) {
	if nh.queue != nil {
		return
	}
	nh.queue, nh.prev, nh.next = q, q.tail, nil
	if q.tail != nil {
		q.tail.next = nh
	} else {
		q.head = nh
	}
	q.tail = nh
	q.len++
}

// remove takes nh out of q; q is nh.queue, nil if nh is in none.
func (q *nodeQueue) remove(nh *nodeHealth) {
	if q == nil || nh.queue != q {
		return
	}
	if nh.prev != nil {
		nh.prev.next = nh.next
	} else {
		q.head = nh.next
	}
	if nh.next != nil {
		nh.next.prev = nh.prev
	} else {
		q.tail = nh.prev
	}
	nh.queue, nh.prev, nh.next = nil, nil, nil
	q.len--
}

// endsPut adds nh to h.ends, by the end of its ejection, or moves it to
// its new end.
func (h *serviceHealth) endsPut(nh *nodeHealth) {
	at := h.p.at(nh.until.Load())
	if nh.ending.Queued() {
		h.ends.Move(nh.ending, at)
		return
	}
	nh.ending = h.ends.Push(nh, at)
}

// endsRemove takes nh out of h.ends, if it is in.
func (h *serviceHealth) endsRemove(nh *nodeHealth) {
	h.ends.Remove(nh.ending)
	nh.ending = nil
}

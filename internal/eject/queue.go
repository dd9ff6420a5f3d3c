package eject

import "container/heap"

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

// ejections is a heap of nodes by the end of their ejection.
type ejections []*nodeHealth

func (q ejections) Len() int           { return len(q) }
func (q ejections) Less(i, j int) bool { return q[i].until.Load() < q[j].until.Load() }
func (q ejections) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapIndex, q[j].heapIndex = i, j
}
func (q *ejections) Push(x any) {
	nh := x.(*nodeHealth)
	nh.heapIndex = len(*q)
	*q = append(*q, nh)
}
func (q *ejections) Pop() any {
	old := *q
	nh := old[len(old)-1]
	old[len(old)-1] = nil
	nh.heapIndex = -1
	*q = old[:len(old)-1]
	return nh
}

// put adds nh, or moves it to its new end.
func (q *ejections) put(nh *nodeHealth) {
	if nh.heapIndex >= 0 {
		heap.Fix(q, nh.heapIndex)
		return
	}
	heap.Push(q, nh)
}

// remove takes nh out, if it is in.
func (q *ejections) remove(nh *nodeHealth) {
	if nh.heapIndex >= 0 {
		heap.Remove(q, nh.heapIndex)
	}
}

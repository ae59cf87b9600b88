package apply

import (
	"sync"
	"time"
)

// lastApplies remembers, per object, the last apply request a Writer sent
// and the resourceVersions around it; the zero value is ready to use and
// safe for concurrent use.
//
// It also covers a reconcile that runs before the cache has delivered the
// Writer's last write: that reads the version the apply was made on top of,
// whose values may differ from desired, and sending the same apply again
// would be a wasted write.
type lastApplies struct {
	mu        sync.Mutex
	byObject  map[objectKey]lastApply
	lastSweep time.Time
}

// objectKey names an object, or its status, within one field manager.
type objectKey struct {
	subresource, kind, namespace, name string
}

// lastApply is one object's last apply request.
type lastApply struct {
	// request is the SHA-256 of the request body, in hex.
	request string
	// onTopOf is the resourceVersion the object was read at before the
	// apply ("" when it did not exist), result the one the apply returned.
	onTopOf, result string
	// used is when the entry was last written or read.
	used time.Time
}

// forgetAfter is how long an entry is kept unused. Every Database is
// reconciled at least once per sync period (10 hours by default), which
// reads the entries of all its objects; what stays unused longer belongs to
// an object that is gone. An entry forgotten too early costs one apply that
// changes nothing.
const forgetAfter = 24 * time.Hour

func (l *lastApplies) get(key objectKey) (lastApply, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.byObject[key]
	if ok {
		last.used = time.Now()
		l.byObject[key] = last
	}
	return last, ok
}

func (l *lastApplies) remember(key objectKey, last lastApply) {
	now := time.Now()
	last.used = now
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byObject == nil {
		l.byObject = map[objectKey]lastApply{}
		l.lastSweep = now
	}
	l.byObject[key] = last
	if now.Sub(l.lastSweep) < forgetAfter {
		return
	}
	for k, v := range l.byObject {
		if now.Sub(v.used) > forgetAfter {
			delete(l.byObject, k)
		}
	}
	l.lastSweep = now
}

func (l *lastApplies) forget(key objectKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byObject, key)
}

package notify

import "testing"

func TestListeners(t *testing.T) {
	var l Listeners
	var a, b int
	removeA := l.AddListener(ListenerFunc(func() { a++ }))
	l.AddListener(ListenerFunc(func() { b++ }))
	l.Notify()
	removeA()
	l.Notify()
	if a != 1 || b != 2 {
		t.Errorf("told a %d and b %d times; want 1 (removed after the first) and 2", a, b)
	}
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/notify"
)

// A term runs the same way for every controller: its constructor declares on the term's Context what it
// watches (Watch), whom it listens to (Listen) and any informer factory of its own (AddFactory); RunTerm
// then registers every handler, starts every factory, waits for every cache once, adds every listener,
// and runs each controller, whose Run is its queue's. At the end of the term every handler and listener
// is removed, every factory shut down, and a controller that never ran is shut down.

// Runnable is a controller of a term: Run returns when ctx ends (nil) or when the controller cannot go
// on (an error, which ends the term). RunTerm calls it once, after every cache of the term has synced.
type Runnable interface {
	Run(ctx context.Context) error
}

// Stopper is a Runnable that holds something from its construction, such as a Queue, whose delayed
// adds own a goroutine: RunTerm calls ShutDown when the term ends before the Runnable ran.
type Stopper interface {
	ShutDown()
}

// RunFunc makes a function a Runnable.
type RunFunc func(ctx context.Context) error

// Run calls f.
func (f RunFunc) Run(ctx context.Context) error { return f(ctx) }

// Named is a Runnable with a name for the log.
type Named struct {
	Name string
	Runnable
}

// Notifier tells its listeners that something changed; a listener then reads the new state itself. The
// issuer is one (leadership, the Active CA, the bundle), and so are the controllers whose progress
// another waits for (the rotation listens to Secret delivery, the injector and the ClusterTrustBundle
// publisher). It is the Notifier half of k8s.io/apiserver's dynamiccertificates.
type Notifier interface {
	// AddListener tells lis (lis.Enqueue, which must not block) of every change until remove is called.
	AddListener(lis dynamiccertificates.Listener) (remove func())
}

// BundleSource gives the CA bundle that certapi injects and publishes, and tells when it changes (the
// issuer is one). The injector and the ClusterTrustBundle publisher read it.
type BundleSource interface {
	// Bundle returns the current PEM bundle; ok=false means there is none yet: do nothing.
	Bundle() (pem []byte, ok bool)
	// AddListener tells lis when the bundle may have changed; remove unregisters it.
	AddListener(lis dynamiccertificates.Listener) (remove func())
}

// ListenerFunc adapts a function to dynamiccertificates.Listener.
type ListenerFunc = notify.ListenerFunc

// Listeners is a Notifier for a producer to hold (package notify).
type Listeners = notify.Listeners

// handlerWatch is one handler a controller declared with Watch, and its registration once the term runs.
type handlerWatch struct {
	informer cache.SharedInformer
	handler  cache.ResourceEventHandler

	mu  sync.Mutex
	reg cache.ResourceEventHandlerRegistration
}

// hasSynced reports whether the handler has been registered and has seen the informer's initial list.
func (w *handlerWatch) hasSynced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reg != nil && w.reg.HasSynced()
}

// listen is one listener a controller declared with Listen.
type listen struct {
	notifier Notifier
	f        func()
}

// Watch declares that a controller of the term handles the events of informer with handler. RunTerm
// registers handler before it starts the informers, waits for its initial list before any controller
// runs, and removes it at the end of the term. The returned function reports whether handler has seen
// that list, for a controller that answers from its cache between terms' events (the injector's AllHold).
// Call Watch from the controller's constructor, before RunTerm.
func (c *Context) Watch(informer cache.SharedInformer, handler cache.ResourceEventHandler) cache.InformerSynced {
	w := &handlerWatch{informer: informer, handler: handler}
	c.declare(func() { c.watches = append(c.watches, w) })
	return w.hasSynced
}

// Listen declares that a controller of the term calls f whenever n announces a change. RunTerm adds the
// listener once every cache has synced, before any controller runs, and removes it at the end of the
// term. f must not block. Call Listen from the controller's constructor, before RunTerm.
func (c *Context) Listen(n Notifier, f func()) {
	c.declare(func() { c.listens = append(c.listens, listen{notifier: n, f: f}) })
}

// AddFactory makes the term start and shut down f with its own factories. Call it from the
// controller's constructor, before RunTerm.
func (c *Context) AddFactory(f Factory) {
	c.declare(func() { c.factories = append(c.factories, f) })
}

// declare records what a constructor declares; after RunTerm began it is a programming error.
func (c *Context) declare(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		panic("controller: a controller was declared on a term that already runs; build every controller before RunTerm")
	}
	f()
}

// slowCaches is how long RunTerm waits for the caches before it says so in the log.
const slowCaches = 30 * time.Second

// RunTerm runs the term until ctx ends: it registers every declared handler, starts every informer
// factory, waits once for every cache, adds every declared listener and runs every controller. It
// returns nil once every controller and informer has stopped and every handler and listener is removed.
// If the caches do not sync before ctx ends, no controller runs. If a controller fails, the term ends
// for all of them and RunTerm returns that error: a leader runs all of its loops or none. A Context runs
// one term: a second RunTerm is refused.
func (c *Context) RunTerm(ctx context.Context, controllers ...Named) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("controller: this term already ran; make a new Context and new controllers for each leadership term")
	}
	c.started = true
	watches, listens, factories := c.watches, c.listens, c.factories
	c.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	logger := klog.FromContext(ctx)
	ran := false
	var registered []*handlerWatch
	defer func() {
		cancel()
		for _, f := range factories {
			f.Shutdown() // waits for the informers to stop
		}
		for _, w := range registered {
			_ = w.informer.RemoveEventHandler(w.reg)
		}
		if !ran {
			for _, n := range controllers {
				if s, ok := n.Runnable.(Stopper); ok {
					s.ShutDown()
				}
			}
		}
	}()

	checkers := make([]cache.DoneChecker, 0, len(watches))
	for _, w := range watches {
		reg, err := w.informer.AddEventHandlerWithOptions(w.handler, cache.HandlerOptions{Logger: &logger})
		if err != nil {
			return fmt.Errorf("registering an event handler: %w", err)
		}
		w.mu.Lock()
		w.reg = reg
		w.mu.Unlock()
		registered = append(registered, w)
		checkers = append(checkers, reg.HasSyncedChecker())
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	slow := time.AfterFunc(slowCaches, func() {
		logger.Info("Still waiting for the term's informer caches; can certapi list and watch webhook configurations, CRDs, APIServices, ConfigMaps, Secrets and its own resources?")
	})
	synced := cache.WaitFor(ctx, "", checkers...)
	slow.Stop()
	if !synced {
		return nil // ctx ended first
	}
	for _, l := range listens {
		defer l.notifier.AddListener(ListenerFunc(l.f))()
	}

	ran = true
	errs := make(chan error, len(controllers))
	var wg sync.WaitGroup
	for _, n := range controllers {
		wg.Go(func() {
			logger := klog.FromContext(ctx).WithName(n.Name)
			logger.V(2).Info("Starting")
			err := n.Run(klog.NewContext(ctx, logger))
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", n.Name, err)
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

package injector

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/certapi/certapi/pkg/controller"
)

// TestNewOptions checks New's defaults and validation of Options, and that a new Injector has not
// synced. Nothing is started and no server is contacted; running an Injector against kube-apiserver
// is covered in test/integration/injector.
func TestNewOptions(t *testing.T) {
	clients, err := controller.NewKubeClients(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	newContext := func() *controller.Context {
		return controller.NewContext("cluster.local", clients, events.NewBroadcaster(&events.EventSinkImpl{Interface: clients.Kube.EventsV1()}))
	}
	i, err := New(Options{Context: newContext(), Source: staticSource(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if i.conflictCooldown != DefaultConflictCooldown {
		t.Errorf("conflict cool-down %s with Options.ConflictCooldown unset; want %s", i.conflictCooldown, DefaultConflictCooldown)
	}
	if i.HasSynced() {
		t.Error("HasSynced before Run")
	}
	if i, err := New(Options{Context: newContext(), Source: staticSource(nil), ConflictCooldown: 2 * time.Second}); err != nil {
		t.Errorf("Options.ConflictCooldown 2s: %v", err)
	} else if i.conflictCooldown != 2*time.Second {
		t.Errorf("conflict cool-down %s with Options.ConflictCooldown 2s", i.conflictCooldown)
	}
	if _, err := New(Options{Context: newContext(), Source: staticSource(nil), ConflictCooldown: -1}); err == nil || !strings.Contains(err.Error(), "ConflictCooldown") {
		t.Errorf("a negative Options.ConflictCooldown: %v; want an error that names it", err)
	}
}

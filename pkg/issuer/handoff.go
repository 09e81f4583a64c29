package issuer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// A follower hands a request to the leader through two etcd keys bound to one short lease:
//
//	<prefix>/handoff/requests/<id>   written by the follower
//	<prefix>/handoff/responses/<id>  written by the leader
//
// The follower revokes the lease once it has the answer, which deletes both keys; if the follower dies,
// the lease expires and etcd deletes them. Nothing accumulates per issuance.

type handoffRequest struct {
	Request
	Lease int64 `json:"lease"`
	// Import, when set, is a CA certificate to import (Import) instead of a certificate to sign.
	Import *ImportRequest `json:"import,omitempty"`
}

type handoffResponse struct {
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	// Refused says the error is the leader's HandoffCheck refusing the request (ErrHandoffRefused).
	Refused bool `json:"refused,omitempty"`
	// KeyUnavailable says the leader's CA key could not sign (signer.ErrKeyUnavailable: its HSM is down).
	KeyUnavailable bool `json:"keyUnavailable,omitempty"`
	// Import is the answer to an import; Problems and Warnings its refusal (signer.IntermediateError),
	// NoPending says no certificate request waited for it (signer.ErrNoPendingRequest).
	Import    *ImportResult    `json:"importResult,omitempty"`
	Problems  []signer.Finding `json:"problems,omitempty"`
	Warnings  []signer.Finding `json:"warnings,omitempty"`
	NoPending bool             `json:"noPending,omitempty"`
}

func (i *Issuer) requestsPrefix() string  { return i.cfg.Prefix + "/handoff/requests/" }
func (i *Issuer) responsesPrefix() string { return i.cfg.Prefix + "/handoff/responses/" }

// handoff asks the leader to sign req, waiting at most the handoff timeout.
func (i *Issuer) handoff(ctx context.Context, req Request) (*Result, error) {
	resp, err := i.handoffRaw(ctx, handoffRequest{Request: req})
	if err != nil {
		return nil, err
	}
	if resp.Refused {
		return nil, fmt.Errorf("%w: %s", ErrHandoffRefused, resp.Error)
	}
	if resp.KeyUnavailable {
		return nil, fmt.Errorf("%w: the leader could not sign: %s", signer.ErrKeyUnavailable, resp.Error)
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("the leader could not sign: %s", resp.Error)
	}
	return resp.Result, nil
}

// handoffRaw writes hreq for the leader and returns its answer, waiting at most the handoff timeout.
func (i *Issuer) handoffRaw(ctx context.Context, hreq handoffRequest) (*handoffResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, i.cfg.HandoffTimeout)
	defer cancel()

	idBytes := make([]byte, 16)
	if _, err := rand.Read(idBytes); err != nil {
		return nil, fmt.Errorf("making a handoff id: %w", err)
	}
	id := hex.EncodeToString(idBytes)

	ttl := int64(math.Ceil(i.cfg.HandoffTimeout.Seconds())) + 5
	lease, err := i.cfg.Client.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("%w: granting a handoff lease: %v", ErrNoLeader, err)
	}
	// Revoke so that the keys go at once, even if the caller has gone, but within the call's deadline:
	// if etcd became unreachable meanwhile, the answer must not wait for it. The lease expires anyway.
	deadline, _ := ctx.Deadline()
	defer func() {
		rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer rcancel()
		if _, err := i.cfg.Client.Revoke(rctx, lease.ID); err != nil {
			klog.FromContext(ctx).V(2).Info("Revoking a handoff lease failed; etcd will expire it", "lease", lease.ID, "err", err)
		}
	}()

	hreq.Lease = int64(lease.ID)
	body, err := json.Marshal(hreq)
	if err != nil {
		return nil, fmt.Errorf("encoding a handoff request: %w", err)
	}
	respKey := i.responsesPrefix() + id
	// Watch first, from the current revision, so an answer written right after the put is not missed.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	put, err := i.cfg.Client.Put(ctx, i.requestsPrefix()+id, string(body), clientv3.WithLease(lease.ID))
	if err != nil {
		return nil, fmt.Errorf("%w: writing a handoff request: %v", ErrNoLeader, err)
	}
	wch := i.cfg.Client.Watch(watchCtx, respKey, clientv3.WithRev(put.Header.Revision))
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: no answer within %s", ErrNoLeader, i.cfg.HandoffTimeout)
		case wr, ok := <-wch:
			if !ok {
				return nil, fmt.Errorf("%w: no answer within %s", ErrNoLeader, i.cfg.HandoffTimeout)
			}
			if err := wr.Err(); err != nil {
				return nil, fmt.Errorf("%w: watching for the leader's answer: %v", ErrNoLeader, err)
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				var resp handoffResponse
				if err := json.Unmarshal(ev.Kv.Value, &resp); err != nil {
					return nil, fmt.Errorf("decoding the leader's answer: %w", err)
				}
				return &resp, nil
			}
		}
	}
}

// serveHandoffs answers handoff requests until ctx ends. Only the leader runs it.
func (i *Issuer) serveHandoffs(ctx context.Context) error {
	// Answer what is already waiting, then everything written after that listing.
	list, err := i.cfg.Client.Get(ctx, i.requestsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("listing pending handoff requests: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, 64)
	handle := func(key string, value []byte) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			i.answer(ctx, key, value)
		}()
	}
	for _, kv := range list.Kvs {
		handle(string(kv.Key), kv.Value)
	}
	wch := i.cfg.Client.Watch(ctx, i.requestsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(list.Header.Revision+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watching handoff requests: %w", err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut && ev.IsCreate() {
				handle(string(ev.Kv.Key), ev.Kv.Value)
			}
		}
	}
	return ctx.Err()
}

// checkHandoff asks Config.CheckHandoff about req; with none configured every handoff is refused, so that
// a leader wired without the check signs nothing it was handed rather than anything.
func (i *Issuer) checkHandoff(ctx context.Context, req Request) error {
	if i.cfg.CheckHandoff == nil {
		return fmt.Errorf("%w: this replica has no check of handed-over requests", ErrHandoffRefused)
	}
	return i.cfg.CheckHandoff(ctx, req)
}

func (i *Issuer) answer(ctx context.Context, key string, value []byte) {
	id := key[len(i.requestsPrefix()):]
	// The requester waits at most the handoff timeout, so waiting for a lease renewal longer is pointless.
	signCtx, cancel := context.WithTimeout(ctx, i.cfg.HandoffTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	var req handoffRequest
	var resp handoffResponse
	if err := json.Unmarshal(value, &req); err != nil {
		resp.Error = "malformed handoff request"
	} else if req.Import != nil {
		if !i.answerImport(signCtx, req.Import, &resp) {
			return
		}
	} else if err := i.checkHandoff(signCtx, req.Request); errors.Is(err, ErrHandoffRefused) {
		// Logged as a warning: a follower hands over only what it read from the stored request, so a
		// refusal is a request changed or deleted in between, or a handoff key written by someone else.
		logger.Info("Refused a handed-over request that the stored ServingCertRequest does not allow", "namespace", req.Namespace, "name", req.Name, "reason", err.Error())
		resp.Error, resp.Refused = err.Error(), true
	} else if err != nil {
		logger.V(2).Info("Could not check a handed-over request against its ServingCertRequest; leaving it to the requester's retry", "namespace", req.Namespace, "name", req.Name, "err", err)
		return
	} else if res, led, err := i.signAsLeader(signCtx, req.Request); !led || errors.Is(err, ErrNoLeader) {
		// This replica stopped leading, or etcd did not renew its lease within the requester's wait: leave
		// the request to the leader there is, or to the requester's deadline (503 with Retry-After).
		return
	} else if err != nil {
		resp.Error, resp.KeyUnavailable = err.Error(), errors.Is(err, signer.ErrKeyUnavailable)
	} else {
		resp.Result = res
	}
	i.putAnswer(ctx, id, req.Lease, resp)
}

// answerImport imports a CA certificate a follower handed over into resp; false when this replica does
// not lead (the requester's deadline answers then).
func (i *Issuer) answerImport(ctx context.Context, req *ImportRequest, resp *handoffResponse) bool {
	res, err := i.importAsLeader(ctx, *req)
	var refused *signer.IntermediateError
	switch {
	case errors.Is(err, ErrNotLeading):
		return false
	case errors.As(err, &refused):
		resp.Problems, resp.Warnings = refused.Problems, refused.Warnings
	case errors.Is(err, signer.ErrNoPendingRequest):
		resp.NoPending, resp.Error = true, err.Error()
	case err != nil:
		resp.Error = err.Error()
	default:
		resp.Import = res
	}
	return true
}

// putAnswer writes the answer to the handoff request id.
func (i *Issuer) putAnswer(ctx context.Context, id string, leaseID int64, resp handoffResponse) {
	body, err := json.Marshal(resp)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Encoding a handoff answer")
		return
	}
	// Bound to the requester's lease: if it has already gone, the put fails and nothing is left behind.
	if _, err := i.cfg.Client.Put(ctx, i.responsesPrefix()+id, string(body), clientv3.WithLease(clientv3.LeaseID(leaseID))); err != nil {
		klog.FromContext(ctx).V(2).Info("Answering a handoff request failed (the requester may have given up)", "id", id, "err", err)
	}
}

package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// APIPrefix is where the JSON API lives.
const APIPrefix = "/api/v1"

// EventSeqHeader, on GET /processes, is the last event seq the listing
// includes: a console that streams events after it misses nothing.
const EventSeqHeader = "Libos-Event-Seq"

// route is one API endpoint: the OpenAPI document must describe exactly
// these, each with the request body it decodes and the query parameters it
// reads.
type route struct {
	method, path string
	body         reflect.Type // what the body decodes into; nil for a route that takes none
	query        []string     // the query parameters it reads; any other is refused
	serve        func(s *Server, w http.ResponseWriter, r *http.Request)
}

// reads names the query parameters r reads.
func (r route) reads(params ...string) route {
	r.query = params
	return r
}

// routes of the API, relative to APIPrefix.
var apiRoutes = []route{
	handle("GET", "/processes", (*Server).listProcesses),
	handleBody("POST", "/processes", (*Server).spawn),
	handle("GET", "/processes/{pid}", (*Server).inspect),
	handle("GET", "/processes/{pid}/context", (*Server).context),
	handle("GET", "/processes/{pid}/messages", (*Server).messages).reads("all", "after", "limit"),
	handleBody("POST", "/processes/{pid}/messages", (*Server).postMessage),
	handleBody("POST", "/processes/{pid}/signal", (*Server).signal),
	handle("GET", "/processes/{pid}/goal", (*Server).goal),
	handleBody("PUT", "/processes/{pid}/goal", (*Server).setGoal),
	handle("GET", "/processes/{pid}/objects", (*Server).objectsOf),
	handleAction("POST", "/processes/{pid}/checkpoints", (*Server).createCheckpoint),
	handle("GET", "/objects/{oid}", (*Server).object),
	handle("GET", "/approvals", (*Server).approvals),
	handleBody("POST", "/approvals", (*Server).decideHold),
	handleBody("POST", "/approvals/{pid}/{call_id}", (*Server).decide),
	handle("GET", "/checkpoints", (*Server).checkpoints).reads("pid"),
	handle("GET", "/checkpoints/{id}", (*Server).inspectCheckpoint),
	handleAction("POST", "/checkpoints/{id}/restore", (*Server).restore),
	handleAction("POST", "/checkpoints/{id}/fork", (*Server).fork),
	// These two write their own answers: a stream, and the document as it is.
	{method: "GET", path: "/events", query: []string{"since", "pid"}, serve: (*Server).events},
	{method: "GET", path: "/openapi.json", serve: (*Server).openAPI},
}

// apiHandler answers a request with a status and a value to send as JSON,
// or with an error answer. Handlers return their answer instead of writing
// it, so that every answer is written one way (serve).
type apiHandler func(s *Server, w http.ResponseWriter, r *http.Request) (int, any, *apiError)

// serve writes what h answers. A json.RawMessage is an answer encoded
// already (a cached detail) and is written as it is.
func (h apiHandler) serve(s *Server, w http.ResponseWriter, r *http.Request) {
	status, v, e := h(s, w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	if b, ok := v.(json.RawMessage); ok {
		writeRaw(w, status, b)
		return
	}
	writeJSON(w, status, v)
}

// handle is a route that reads no body.
func handle(method, path string, h apiHandler) route {
	return route{method: method, path: path, serve: h.serve}
}

// handleBody is a route whose body decodes into a T before h runs: the
// body's errors come before those of the path.
func handleBody[T any](method, path string, h func(s *Server, w http.ResponseWriter, r *http.Request, req T) (int, any, *apiError)) route {
	decoded := func(s *Server, w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
		var req T
		if e := s.decodeBody(w, r, &req); e != nil {
			return 0, nil, e
		}
		return h(s, w, r, req)
	}
	return route{method: method, path: path, body: reflect.TypeFor[T](), serve: apiHandler(decoded).serve}
}

// handleAction is a route of an action that takes no argument: no body,
// or an empty JSON object.
func handleAction(method, path string, h apiHandler) route {
	checked := func(s *Server, w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
		if e := s.emptyBody(w, r); e != nil {
			return 0, nil, e
		}
		return h(s, w, r)
	}
	return route{method: method, path: path, serve: apiHandler(checked).serve}
}

// result is the answer of a runtime call: v with status, or err's answer.
func result(status int, v any, err error) (int, any, *apiError) {
	if err != nil {
		return 0, nil, kernelError(err)
	}
	return status, v, nil
}

// changed is the result of a call that changes the runtime: when it
// succeeds the scheduler loop is told, as there may be work to run.
func (s *Server) changed(status int, v any, err error) (int, any, *apiError) {
	if err == nil {
		s.kick()
	}
	return result(status, v, err)
}

func (s *Server) apiMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range apiRoutes {
		serve, known := rt.serve, rt.query
		mux.HandleFunc(rt.method+" "+APIPrefix+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if e := checkQuery(r, known); e != nil {
				writeError(w, e)
				return
			}
			serve(s, w, r)
		})
	}
	mux.HandleFunc(APIPrefix+"/", s.unrouted)
	return mux
}

// unrouted answers a path no route has (404), or a method the path's
// routes do not take (405 with Allow).
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.api.Handler(probe); pattern != "" && pattern != APIPrefix+"/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, errNotFound("%s %s: no such endpoint (see %s/openapi.json)", r.Method, r.URL.Path, APIPrefix))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
		Message: fmt.Sprintf("%s %s: the method must be %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
}

// checkQuery refuses a query that is malformed, names a parameter the route
// does not read (a typo would otherwise be ignored), or names one twice.
func checkQuery(r *http.Request, known []string) *apiError {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errInvalid("query: malformed: %v", err)
	}
	names := slices.Sorted(maps.Keys(q))
	for _, name := range names {
		if !slices.Contains(known, name) {
			takes := "this endpoint takes none"
			if len(known) > 0 {
				takes = "known: " + strings.Join(known, ", ")
			}
			return errInvalid("query parameter %q: not known (%s)", name, takes)
		}
		if n := len(q[name]); n > 1 {
			return errInvalid("query parameter %q: given %d times; give it once", name, n)
		}
	}
	return nil
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
}

// parsePID parses a pid given in a path or a query.
func parsePID(v string) (int64, *apiError) {
	pid, err := strconv.ParseInt(v, 10, 64)
	if err != nil || pid <= 0 {
		return 0, errInvalid("pid %q: must be a positive integer", v)
	}
	return pid, nil
}

// pathPID parses the {pid} of r's path.
func pathPID(r *http.Request) (int64, *apiError) { return parsePID(r.PathValue("pid")) }

// existing parses {pid} and checks the process exists.
func (s *Server) existing(r *http.Request) (kernel.ProcessInfo, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return kernel.ProcessInfo{}, e
	}
	info, err := s.rt.Process(pid)
	if err != nil {
		return kernel.ProcessInfo{}, kernelError(err)
	}
	return info, nil
}

// ProcessRow is one process as GET /processes lists it: the row of
// `libos ps --json`.
type ProcessRow struct {
	PID       int64   `json:"pid"`
	ParentPID *int64  `json:"parent_pid"`
	Image     string  `json:"image"`
	Status    string  `json:"status"`
	WaitingOn *string `json:"waiting_on"`
	// NextAttempt is when a provider backoff asks again.
	NextAttempt *time.Time `json:"next_attempt_at,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	ResultOID   string     `json:"result_oid,omitempty"`
	Turn        int        `json:"turn"`
	CreatedAt   time.Time  `json:"created_at"`
	AgeSeconds  int64      `json:"age_seconds"`
}

// Row is p as ps --json shows it at now.
func Row(p kernel.ProcessInfo, now time.Time) ProcessRow {
	r := ProcessRow{PID: p.PID, Image: p.Image, Status: string(p.Status), Reason: p.Reason, ResultOID: p.ResultOID, Turn: p.Turn,
		CreatedAt: p.CreatedAt.UTC(), AgeSeconds: int64(now.Sub(p.CreatedAt).Seconds())}
	if p.ParentPID != 0 {
		pp := p.ParentPID
		r.ParentPID = &pp
	}
	if w := WaitingOn(p); w != "" {
		r.WaitingOn = &w
	}
	if p.Wait != nil && p.Wait.Kind == process.WaitProvider && !p.Wait.Until.IsZero() {
		at := p.Wait.Until.UTC()
		r.NextAttempt = &at
	}
	return r
}

// WaitingOn says what a waiting process waits on, as ps shows it.
func WaitingOn(p kernel.ProcessInfo) string {
	if p.Wait == nil {
		return ""
	}
	switch p.Wait.Kind {
	case "child":
		return fmt.Sprintf("child %d", p.Wait.ChildPID)
	case "timer":
		return "timer until " + p.Wait.Until.UTC().Format(time.RFC3339)
	}
	return string(p.Wait.Kind)
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	ps, seq, err := s.processes()
	if err != nil {
		return 0, nil, kernelError(err)
	}
	now := s.opts.Now()
	rows := make([]ProcessRow, len(ps))
	for i, p := range ps {
		rows[i] = Row(p, now)
	}
	// Every event up to seq shows in the listing (later ones may too).
	w.Header().Set(EventSeqHeader, strconv.FormatUint(seq, 10))
	return http.StatusOK, rows, nil
}

// SpawnRequest is the body of POST /processes.
type SpawnRequest struct {
	Image string `json:"image"`
	Goal  string `json:"goal"`
	// Grants, Asks and Denies are RESOURCE=RIGHTS[@USES][~DURATION] specs,
	// as run's --grant, --ask and --deny take them.
	Grants []string `json:"grants,omitempty"`
	Asks   []string `json:"asks,omitempty"`
	Denies []string `json:"denies,omitempty"`
	// Skills are names of loaded skills whose tools' scopes the process may
	// execute.
	Skills []string `json:"skills,omitempty"`
	// Budget lowers the image's limits (0 fields keep them).
	Budget *capabilities.Budget `json:"budget,omitempty"`
}

// SpawnResponse answers POST /processes.
type SpawnResponse struct {
	PID int64 `json:"pid"`
}

// maxGoalBytes bounds a goal (a request body is bounded too).
const maxGoalBytes = 256 << 10

func (s *Server) spawn(w http.ResponseWriter, r *http.Request, req SpawnRequest) (int, any, *apiError) {
	spec, e := s.spawnSpec(req)
	if e != nil {
		return 0, nil, e
	}
	pid, err := s.rt.Spawn(spec)
	if err != nil {
		return 0, nil, kernelError(err)
	}
	s.kick()
	w.Header().Set("Location", fmt.Sprintf("%s/processes/%d", APIPrefix, pid))
	return http.StatusCreated, SpawnResponse{PID: pid}, nil
}

// spawnSpec checks a spawn request and builds the root's grants as run
// does: the clock, the grants and asks, the denies last.
func (s *Server) spawnSpec(req SpawnRequest) (kernel.SpawnSpec, *apiError) {
	switch {
	case strings.TrimSpace(req.Image) == "":
		return kernel.SpawnSpec{}, errInvalid("image: required (for example base:v0)")
	case strings.TrimSpace(req.Goal) == "":
		return kernel.SpawnSpec{}, errInvalid("goal: required")
	case len(req.Goal) > maxGoalBytes:
		return kernel.SpawnSpec{}, errInvalid("goal: %d bytes, more than %d", len(req.Goal), maxGoalBytes)
	case !utf8.ValidString(req.Goal):
		return kernel.SpawnSpec{}, errInvalid("goal: must be UTF-8")
	}
	now := s.opts.Now()
	grants := []capabilities.Grant{
		{ID: "api-clock-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
		{ID: "api-clock-sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	parse := func(field string, specs []string, effect capabilities.Effect) *apiError {
		for i, spec := range specs {
			g, err := capabilities.ParseGrantSpec(fmt.Sprintf("api-%s-%d", field, i+1), spec, effect, now)
			if err != nil {
				return errInvalid("%s[%d]: %v", field, i, err)
			}
			grants = append(grants, g)
		}
		return nil
	}
	if e := parse("grants", req.Grants, capabilities.Allow); e != nil {
		return kernel.SpawnSpec{}, e
	}
	if e := parse("asks", req.Asks, capabilities.Ask); e != nil {
		return kernel.SpawnSpec{}, e
	}
	scopes, e := s.skillScopes(req.Skills)
	if e != nil {
		return kernel.SpawnSpec{}, e
	}
	for i, sc := range scopes {
		grants = append(grants, capabilities.Grant{ID: fmt.Sprintf("api-skills-%d", i+1), Resource: capabilities.ScopeResource(sc),
			Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Allow})
	}
	if e := parse("denies", req.Denies, capabilities.Deny); e != nil {
		return kernel.SpawnSpec{}, e
	}
	spec := kernel.SpawnSpec{Image: req.Image, Goal: req.Goal, Grants: grants}
	if req.Budget != nil {
		if err := req.Budget.Validate(); err != nil {
			return kernel.SpawnSpec{}, errInvalid("budget: %v", err)
		}
		spec.Budget = *req.Budget
	}
	return spec, nil
}

// skillScopes are the scopes the tools of the named skills own.
func (s *Server) skillScopes(names []string) ([]string, *apiError) {
	if len(names) == 0 {
		return nil, nil
	}
	if s.opts.Skills == nil {
		return nil, errInvalid("skills: no skill packages are loaded (start libos serve with --skills DIR)")
	}
	byName := map[string][]string{}
	var loaded []string
	for _, sk := range s.opts.Skills.Skills() {
		byName[sk.Name] = sk.Tools
		loaded = append(loaded, sk.Name)
	}
	owned := map[string][]string{}
	for _, t := range s.opts.Skills.Tools() {
		owned[t.Name] = t.Scopes
	}
	var scopes []string
	for i, name := range names {
		toolNames, ok := byName[name]
		if !ok {
			return nil, errInvalid("skills[%d]: no skill %q is loaded (loaded: %s)", i, name, strings.Join(loaded, ", "))
		}
		for _, t := range toolNames {
			for _, sc := range owned[t] {
				if !slices.Contains(scopes, sc) {
					scopes = append(scopes, sc)
				}
			}
		}
	}
	return scopes, nil
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	b, err := s.detail(pid)
	return result(http.StatusOK, json.RawMessage(b), err)
}

func (s *Server) context(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	v, err := s.rt.ContextOf(pid)
	return result(http.StatusOK, v, err)
}

// queryBool parses an optional boolean query parameter.
func queryBool(r *http.Request, name string) (bool, *apiError) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errInvalid("%s %q: must be true or false", name, v)
	}
	return b, nil
}

// MessagePage answers GET /processes/{pid}/messages: the mailbox, and with
// after a page of it.
type MessagePage struct {
	kernel.MessageList
	// NextAfter, on a page read with after, is the after of the next page;
	// it is absent on the last page.
	NextAfter uint64 `json:"next_after,omitempty"`
}

// Bounds of a page of messages.
const (
	defaultMessagePage = 100
	maxMessagePage     = 1000
	// messagePageBytes bounds the text of a page, as the kernel bounds its
	// answer; a page holds at least one message.
	messagePageBytes = 4 << 20
)

func (s *Server) messages(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	all, e := queryBool(r, "all")
	if e != nil {
		return 0, nil, e
	}
	q := r.URL.Query()
	if !q.Has("after") {
		if q.Has("limit") {
			return 0, nil, errInvalid("limit: only a page read with after takes a limit (after=0 starts at the oldest message)")
		}
		// The newest messages that fit; omitted counts the older ones,
		// which pages read with after reach.
		v, err := s.rt.Messages(pid, all)
		return result(http.StatusOK, MessagePage{MessageList: v}, err)
	}
	after, err := strconv.ParseUint(q.Get("after"), 10, 64)
	if err != nil {
		return 0, nil, errInvalid("after %q: must be a message seq (a non-negative integer; 0 starts at the oldest)", q.Get("after"))
	}
	limit := defaultMessagePage
	if v := q.Get("limit"); q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxMessagePage {
			return 0, nil, errInvalid("limit %q: must be an integer from 1 to %d", v, maxMessagePage)
		}
		limit = n
	}
	page, err := s.messagePage(pid, all, after, limit)
	return result(http.StatusOK, page, err)
}

// messagePage reads the messages of pid with a seq after after, oldest
// first: at most limit, and no more text than messagePageBytes.
func (s *Server) messagePage(pid int64, all bool, after uint64, limit int) (MessagePage, error) {
	if _, err := s.rt.Process(pid); err != nil {
		return MessagePage{}, err
	}
	out := MessagePage{MessageList: kernel.MessageList{PID: pid, Messages: []mailbox.Message{}}}
	err := s.rt.Store().View(func(tx *objects.Txn) error {
		var err error
		if out.Unread, out.Total, err = mailbox.Count(tx, pid); err != nil {
			return err
		}
		size := 0
		take := func(m *mailbox.Message) error {
			n := len(m.Body) + len(m.Payload) + len(m.Subject)
			if len(out.Messages) == limit || (len(out.Messages) > 0 && size+n > messagePageBytes) {
				out.NextAfter = out.Messages[len(out.Messages)-1].Seq
				return objects.ErrStopScan
			}
			size += n
			out.Messages = append(out.Messages, *m)
			return nil
		}
		if all {
			return mailbox.ListAfter(tx, pid, after, take)
		}
		return mailbox.UnreadAfter(tx, pid, after, take)
	})
	if err != nil {
		return MessagePage{}, fmt.Errorf("messages of pid %d: %w", pid, err)
	}
	return out, nil
}

// MessageRequest is the body of POST /processes/{pid}/messages.
type MessageRequest struct {
	Body      string `json:"body"`
	From      string `json:"from,omitempty"`
	Subject   string `json:"subject,omitempty"`
	Interrupt bool   `json:"interrupt,omitempty"`
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request, req MessageRequest) (int, any, *apiError) {
	info, e := s.existing(r)
	if e != nil {
		return 0, nil, e
	}
	switch {
	case strings.TrimSpace(req.Body) == "":
		return 0, nil, errInvalid("body: required")
	case len(req.From) > 200:
		return 0, nil, errInvalid("from: at most 200 bytes")
	case info.Status.Terminal():
		return 0, nil, errConflict("pid %d has ended (%s); its mailbox is closed", info.PID, info.Status)
	}
	m, err := s.rt.PostHumanMessage(kernel.HumanMessage{To: info.PID, From: req.From, Body: req.Body, Subject: req.Subject, Interrupt: req.Interrupt})
	return s.changed(http.StatusCreated, m, err)
}

// SignalRequest is the body of POST /processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request, req SignalRequest) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	switch req.Signal {
	case kernel.SignalKill, kernel.SignalPause, kernel.SignalContinue:
	case "":
		return 0, nil, errInvalid("signal: required: kill, pause or continue")
	default:
		return 0, nil, errInvalid("signal %q: must be kill, pause or continue", req.Signal)
	}
	rep, err := s.rt.Signal(pid, req.Signal)
	return s.changed(http.StatusOK, rep, err)
}

func (s *Server) goal(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	v, err := s.rt.GoalOf(pid)
	return result(http.StatusOK, v, err)
}

// GoalRequest is the body of PUT /processes/{pid}/goal.
type GoalRequest struct {
	Goal string `json:"goal"`
}

// GoalSet answers PUT /processes/{pid}/goal: the goal Object's new version.
type GoalSet struct {
	PID     int64  `json:"pid"`
	OID     string `json:"oid"`
	Version uint64 `json:"version"`
}

func (s *Server) setGoal(w http.ResponseWriter, r *http.Request, req GoalRequest) (int, any, *apiError) {
	info, e := s.existing(r)
	if e != nil {
		return 0, nil, e
	}
	switch {
	case strings.TrimSpace(req.Goal) == "":
		return 0, nil, errInvalid("goal: required")
	case len(req.Goal) > maxGoalBytes:
		return 0, nil, errInvalid("goal: %d bytes, more than %d", len(req.Goal), maxGoalBytes)
	case info.Status.Terminal():
		return 0, nil, errConflict("pid %d has ended (%s); its goal cannot change", info.PID, info.Status)
	}
	meta, err := s.rt.SetGoal(info.PID, req.Goal)
	return s.changed(http.StatusOK, GoalSet{PID: info.PID, OID: meta.OID, Version: meta.Version}, err)
}

func (s *Server) objectsOf(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	v, err := s.rt.ObjectsOf(pid)
	return result(http.StatusOK, v, err)
}

func (s *Server) object(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	v, err := s.rt.ObjectByID(r.PathValue("oid"))
	return result(http.StatusOK, v, err)
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	list, err := s.approvalList()
	return result(http.StatusOK, list, err)
}

// HoldDecisionRequest is the body of POST /approvals: a decision naming the
// held call in the body. A call id is the model's choice, and one such as
// "." or ".." cannot be a path segment (clients and servers collapse it).
type HoldDecisionRequest struct {
	PID    int64  `json:"pid"`
	CallID string `json:"call_id"`
	// ApprovalID is the id GET /approvals listed (see DecisionRequest).
	ApprovalID string `json:"approval_id,omitempty"`
	Decision   string `json:"decision"`
	Reason     string `json:"reason,omitempty"`
}

// DecisionRequest is the body of POST /approvals/{pid}/{call_id}.
type DecisionRequest struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// ApprovalID is the id GET /approvals listed: the decision then decides
	// that hold only, not a later call with the same call id.
	ApprovalID string `json:"approval_id,omitempty"`
}

// Decision answers POST /approvals/{pid}/{call_id}.
type Decision struct {
	PID      int64  `json:"pid"`
	CallID   string `json:"call_id"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, req DecisionRequest) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	return s.decideRef(kernel.ApprovalRef{PID: pid, CallID: r.PathValue("call_id"), ID: req.ApprovalID}, req.Decision, req.Reason)
}

func (s *Server) decideHold(w http.ResponseWriter, r *http.Request, req HoldDecisionRequest) (int, any, *apiError) {
	switch {
	case req.PID <= 0:
		return 0, nil, errInvalid("pid: required: a positive integer")
	case req.CallID == "":
		return 0, nil, errInvalid("call_id: required: the call id GET /approvals lists")
	}
	return s.decideRef(kernel.ApprovalRef{PID: req.PID, CallID: req.CallID, ID: req.ApprovalID}, req.Decision, req.Reason)
}

// decideRef approves or denies the held call ref names.
func (s *Server) decideRef(ref kernel.ApprovalRef, decision, reason string) (int, any, *apiError) {
	switch decision {
	case "approve":
		if reason != "" {
			return 0, nil, errInvalid("reason: only a deny takes a reason")
		}
		err := s.rt.Approve(ref)
		return s.changed(http.StatusOK, Decision{PID: ref.PID, CallID: ref.CallID, Decision: "approved"}, err)
	case "deny":
		err := s.rt.DenyApproval(ref, reason)
		return s.changed(http.StatusOK, Decision{PID: ref.PID, CallID: ref.CallID, Decision: "denied", Reason: reason}, err)
	case "":
		return 0, nil, errInvalid("decision: required: approve or deny")
	}
	return 0, nil, errInvalid("decision %q: must be approve or deny", decision)
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	var root int64
	if v := r.URL.Query().Get("pid"); v != "" {
		pid, e := parsePID(v)
		if e != nil {
			return 0, nil, e
		}
		// The list only filters by root: a pid no process has would
		// answer an empty success.
		if _, err := s.rt.Process(pid); err != nil {
			return 0, nil, kernelError(err)
		}
		root = pid
	}
	list, err := s.rt.Checkpoints(root)
	if list == nil {
		list = []kernel.Checkpoint{}
	}
	return result(http.StatusOK, list, err)
}

func (s *Server) createCheckpoint(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	pid, e := pathPID(r)
	if e != nil {
		return 0, nil, e
	}
	cp, err := s.rt.CreateCheckpoint(pid)
	return result(http.StatusCreated, cp, err)
}

func (s *Server) inspectCheckpoint(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	cp, err := s.rt.InspectCheckpoint(r.PathValue("id"))
	return result(http.StatusOK, cp, err)
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	rep, err := s.rt.RestoreCheckpoint(r.PathValue("id"))
	return s.changed(http.StatusOK, rep, err)
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) (int, any, *apiError) {
	rep, err := s.rt.ForkCheckpoint(r.PathValue("id"))
	return s.changed(http.StatusCreated, rep, err)
}

// emptyBody accepts no body, or an empty JSON object, for an action that
// takes no argument.
func (s *Server) emptyBody(w http.ResponseWriter, r *http.Request) *apiError {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	var none struct{}
	return s.decodeBody(w, r, &none)
}

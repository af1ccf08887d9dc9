"""The Lua scripts that fence a session's record in Redis (see :mod:`omni_grpc.server.durable`).

Every session record carries a fencing token, its ``fence`` field (an epoch): 1 when a replica
opens the session, and one more each time a peer adopts it (:data:`CLAIM`). A replica writes a
record only through :data:`WRITE` and deletes it only through :data:`DROP`, both of which first
check, atomically inside Redis, that the record's epoch is still the one the replica holds. So a
replica that stalled past its lease (SIGSTOP, a long pause, swap) and wakes up after a peer
adopted its session cannot overwrite the adopter's record: its write is refused, and it learns
that its copy of the session is stale.
"""

from __future__ import annotations


# The keys of a session's record and of a replica's lease.
def session_key(session_id: str) -> str:
    return f"omni:session:{session_id}"


def journal_key(session_id: str) -> str:
    return f"omni:journal:{session_id}"


def input_key(session_id: str) -> str:
    return f"omni:input:{session_id}"


def commands_key(session_id: str) -> str:
    return f"omni:commands:{session_id}"


def record_keys(session_id: str) -> list[str]:
    """The keys of one session's record, in the order the fenced scripts take them."""
    return [
        session_key(session_id),
        journal_key(session_id),
        input_key(session_id),
        commands_key(session_id),
    ]


def lease_key(route: str) -> str:
    return f"omni:replica:{route}"


# KEYS: record. ARGV: the owner the claimer saw, the claimer's route.
# Sets the record's route to ARGV[2] and bumps its epoch, only if its route is still ARGV[1]:
# of two peers adopting the same session at once, exactly one wins. Returns the new epoch, 0
# when another peer was first (or the record is gone).
CLAIM = """
local owner = redis.call('HGET', KEYS[1], 'route')
if owner == false or owner ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'route', ARGV[2])
return redis.call('HINCRBY', KEYS[1], 'fence', 1)
"""

# KEYS: record, journal, input, commands. ARGV: epoch, may_create (1/0), whole (1/0), ttl_ms,
# trim_through (-1: none), field count n, input_drop (appends to drop from the front of the
# input list; -1: none), input count m, command count k (-1: unchanged), then n field/value
# pairs, m appends, k commands, then seq/payload pairs of journal entries.
# Writes only if the record's epoch is ARGV[1], or if there is no record and ARGV[2] allows
# one to be made (a session's first write, or Redis came back empty). Returns {1} when written,
# {0, route} when refused, route naming the record's owner now ('' when there is no record).
# The state, its journal entries, the uncommitted input and the commands the engine had not
# applied go in together: the stored applied_client_seq never covers an effect the store lacks.
WRITE = """
local epoch = redis.call('HGET', KEYS[1], 'fence')
if (epoch == false and ARGV[2] ~= '1') or (epoch ~= false and epoch ~= ARGV[1]) then
  return {0, redis.call('HGET', KEYS[1], 'route') or ''}
end
if ARGV[3] == '1' then redis.call('DEL', KEYS[2], KEYS[3], KEYS[4]) end
local n, m, k = tonumber(ARGV[6]), tonumber(ARGV[8]), tonumber(ARGV[9])
local fields = {'fence', ARGV[1]}
for i = 10, 9 + 2 * n do fields[#fields + 1] = ARGV[i] end
local first = 10 + 2 * n
local drop = tonumber(ARGV[7])
if drop > 0 then redis.call('LTRIM', KEYS[3], drop, -1) end
-- RPUSH and ZADD in slices: unpack() of a long list would overflow Lua's stack.
local batch = {}
for i = first, first + m - 1 do
  batch[#batch + 1] = ARGV[i]
  if #batch >= 1000 then redis.call('RPUSH', KEYS[3], unpack(batch)); batch = {} end
end
if #batch > 0 then redis.call('RPUSH', KEYS[3], unpack(batch)) end
first = first + m
if k >= 0 then
  redis.call('DEL', KEYS[4])
  if k > 0 then redis.call('RPUSH', KEYS[4], unpack(ARGV, first, first + k - 1)) end
  first = first + k
end
batch = {}
for i = first, #ARGV, 2 do
  batch[#batch + 1] = ARGV[i]
  batch[#batch + 1] = ARGV[i + 1]
  if #batch >= 1000 then redis.call('ZADD', KEYS[2], unpack(batch)); batch = {} end
end
if #batch > 0 then redis.call('ZADD', KEYS[2], unpack(batch)) end
if tonumber(ARGV[5]) >= 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], 0, ARGV[5]) end
redis.call('HSET', KEYS[1], unpack(fields))
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
return {1}
"""

# KEYS: record, journal, input, commands. ARGV: epoch. Deletes an ended session's record,
# unless a peer has adopted it since (its epoch moved on): the adopter's session is not this
# replica's to end.
DROP = """
local epoch = redis.call('HGET', KEYS[1], 'fence')
if epoch ~= false and epoch ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
"""

# KEYS: lease. ARGV: state, ttl_ms. Renews the lease; returns 1 if it was still there, 0 if it
# had lapsed (the replica stalled past it, so a peer may have adopted its sessions meanwhile).
RENEW = """
local held = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return held
"""

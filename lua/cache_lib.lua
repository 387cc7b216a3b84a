-- cache_lib: the versioned cache fill's comparisons, shared by
-- cache_fill.lua and cache_fill_hashes.lua (package lua prepends it).
-- A cache field holds "<version> <value>"; versions are decimal integers
-- without sign or leading zeros, compared exactly, never as floats.

-- stored_version is the version in front of a stored value, or nil: a
-- value without one counts as absent, and a fill repairs it.
local function stored_version(held)
  if not held then return nil end
  local space = string.find(held, ' ', 1, true)
  if not space then return nil end
  local version = string.sub(held, 1, space - 1)
  if not string.match(version, '^%d+$') then return nil end
  return version
end

-- older says whether the canonical version held is below version.
local function older(held, version)
  if #held ~= #version then return #held < #version end
  return held < version
end

-- fill_field writes "<version> <value>" to key's field unless held, what
-- the field holds, has the same or a newer version; returns 1 (written)
-- or 0, and what the field holds after.
local function fill_field(key, field, version, value, held)
  local held_version = stored_version(held)
  if held_version == nil or older(held_version, version) then
    held = version .. ' ' .. value
    redis.call('HSET', key, field, held)
    return 1, held
  end
  return 0, held
end

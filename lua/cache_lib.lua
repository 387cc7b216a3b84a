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

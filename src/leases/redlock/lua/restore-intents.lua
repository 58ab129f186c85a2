
local function restore_intents(from)
  for i = from, #ARGV - 5, 6 do
    local fields = {'b', ARGV[i + 1], 'k', ARGV[i + 2], 'at', ARGV[i + 3]}
    if ARGV[i + 4] ~= '' then
      fields[#fields + 1] = 'lid'; fields[#fields + 1] = ARGV[i + 4]
      fields[#fields + 1] = 'tok'; fields[#fields + 1] = ARGV[i + 5]
    end
    put_intent(ARGV[i], ARGV[i + 1], ARGV[i + 2], fields)
  end
end

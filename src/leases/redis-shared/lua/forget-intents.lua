--{{PRELUDE}}

for i = 3, #ARGV do forget_intent(ARGV[i]) end
return #ARGV - 2

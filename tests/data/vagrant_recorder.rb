# Loads a Vagrantfile without Vagrant and prints every setting it makes, one
# per line ("config.vm.box=..." or "config.vm.provider(\"libvirt\")..."),
# provider blocks' overrides under "<provider>.override". Used by
# tests/unit/test_lab_files.py to check the lab's boxes against provision.sh.
class Recorder
  def initialize(path)
    @path = path
  end

  def method_missing(name, *args, **kw, &blk)
    n = name.to_s
    return puts("#{(@path + [n.chomp('=')]).join('.')}=#{args.first.inspect}") if n.end_with?("=")
    if blk
      scope = @path + [n, args.first.to_s]
      blk.call(Recorder.new(scope), Recorder.new(scope + ["override"]))
      return nil
    end
    return Recorder.new(@path + [n]) if args.empty? && kw.empty?
    shown = args.map(&:inspect) + kw.map { |k, v| "#{k}: #{v.inspect}" }
    puts "#{(@path + [n]).join('.')}(#{shown.join(', ')})"
  end

  def respond_to_missing?(*)
    true
  end
end

module Vagrant
  def self.configure(_version)
    yield Recorder.new(["config"])
  end
end

load ARGV.fetch(0)
